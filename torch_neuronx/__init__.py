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


import torch  # noqa: E402

from . import _C  # noqa: E402
from .runtime import config as _config
from .runtime import profiles as _profiles

__version__ = "0.1.0"

from .compile import get_dynamo_metrics, reset_dynamo_metrics  # noqa: E402,F401


def _register() -> None:
    topology = _profiles.resolve_topology()
    _C._set_fused_attention(_config.env_flag("TORCH_NEURONX_ENABLE_NKI_SDPA", True))
    _C._install_host_pool(_config.env_int("TORCHNEURON_HOST_POOL_MB", 1024) * 2**20)
    _C._configure_devices(topology.device_count, topology.hbm_per_core)
    if topology.device_count:
        _C._set_default_device(topology.default_device)

    torch.utils.rename_privateuse1_backend("neuron")
    from . import neuron

    neuron._set_topology(topology)
    torch._register_device_module("neuron", neuron)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    from . import amp

    amp.install()
    from .compile import cache as compile_cache

    compile_cache.install()
    from . import distributed

    distributed.install(topology)
    from . import fidelity

    fidelity.install(topology)


_register()

from .fidelity import (  # noqa: E402  (public API of the fidelity layer, docs/fidelity.md)
    clear_op_tracking,
    export_metrics,
    get_64bit_mode,
    get_executed_ops,
    get_fallback_ops,
    get_host_ops,
    kernel_accounting_enabled,
    metrics,
    reset_metrics,
    set_64bit_mode,
    set_host_ops,
    set_kernel_accounting,
)
