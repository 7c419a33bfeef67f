"""TorchNeuron-OSS: the ``neuron`` PyTorch device, emulated on the host.

Importing this package (or plain ``import torch``, through PyTorch's backend
autoload entry point) registers PrivateUse1 as ``neuron``, installs the
``torch.neuron`` device module and generates ``Tensor.neuron()`` and friends.
The import name is the one Transformers and Accelerate look for.
"""
from __future__ import annotations


def _autoload() -> None:
    """Entry point of ``torch.backends``: registration runs at import.

    Defined before ``import torch`` because importing this package first
    makes torch's autoload look this function up on the half-imported module.
    """


import os  # noqa: E402

import torch  # noqa: E402

from .runtime.extension import _C  # noqa: E402  (loads the C++ extension, registering the device)
from .runtime import profiles as _profiles  # noqa: E402

__version__ = "0.1.0"

from .compile import get_dynamo_metrics, reset_dynamo_metrics  # noqa: E402,F401


def _register() -> None:
    """Register the device. A bad environment variable must not break ``import
    torch``: the device is registered with defaults and the ``ConfigError`` is
    raised at the first device use or ``init_process_group`` (docs/configuration.md)."""
    from . import neuron
    from .runtime import settings
    from .runtime.errors import ConfigError

    config_error = settings.defer_bad_values()
    try:
        topology = _profiles.resolve_topology()
    except ConfigError as exc:
        config_error = config_error or exc
        topology = _profiles.default_topology()

    neuron._configure(topology)
    neuron.autograd_workers.install()  # first: exit handlers run last-registered first
    torch.utils.rename_privateuse1_backend("neuron")
    torch._register_device_module("neuron", neuron)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    from . import accounting, amp, compile, distributed, numerics, profiling

    precision_error = numerics.install(topology.profile)
    config_error = config_error or precision_error
    amp.install()
    compile.install(neuron)
    distributed.install(topology)
    accounting.install(topology)
    profiling.install()
    if config_error is not None:
        neuron.defer_config_error(config_error)


def reconfigure(instance: str | None = None, hbm_per_core: int | None = None) -> None:
    """Redo the import-time configuration for another instance or core size.

    ``instance`` switches the instance profile (and exports
    ``TORCHNEURON_INSTANCE`` so that child processes see the same one); the
    topology is resolved again from it and the environment, the device count
    and per-core HBM (``hbm_per_core`` bytes overrides the profile's) are
    applied, and kernel signatures are salted for the new target and LNC. Call
    it before any device memory is in use: tensors already allocated keep
    their charge to the old cores. A bad ``instance`` raises ``ConfigError``
    and changes nothing.
    """
    from . import accounting, neuron, numerics

    profile = _profiles.get_profile(instance) if instance is not None else None
    topology = _profiles.resolve_topology(profile)
    if hbm_per_core is not None and hbm_per_core <= 0:
        raise ValueError(f"hbm_per_core must be a positive number of bytes, not {hbm_per_core}")
    if instance is not None:
        os.environ["TORCHNEURON_INSTANCE"] = instance
    neuron._configure(topology, hbm_per_core)
    accounting.reconfigure(topology)
    numerics.configure(topology.profile)  # the instance's FP8 formats; raises for a bad precision variable


_register()

from .accounting import (  # noqa: E402  (public API of the accounting layer, docs/fidelity.md)
    clear_op_tracking,
    export_metrics,
    get_executed_ops,
    get_fallback_ops,
    get_host_ops,
    kernel_accounting_enabled,
    metrics,
    reset_metrics,
    set_host_ops,
    set_kernel_accounting,
)
from .numerics import get_64bit_mode, set_64bit_mode  # noqa: E402  (docs/fidelity.md, "64-bit values")
from .neuron.random import get_rng_source, set_rng_source  # noqa: E402  (docs/device.md, "Random numbers")

# NKI emulation (docs/nki.md): `import nki` resolves to torch_neuronx.nki unless the real package is installed.
from .nki.finder import install as _install_nki_finder  # noqa: E402

_install_nki_finder()
from .nki.torch_op import nki_op  # noqa: E402,F401
