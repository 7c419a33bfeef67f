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
from .runtime import profiles as _profiles
from .runtime.config import env_choice as _env_choice  # noqa: E402

__version__ = "0.1.0"

_NARROWING_MODES = {"off": 0, "narrow": 1, "strict": 2}


def _register() -> None:
    topology = _profiles.resolve_topology()
    _C._configure_devices(topology.device_count, topology.hbm_per_core)
    if topology.device_count:
        _C._set_default_device(topology.default_device)
    _C._set_narrowing_mode(
        _NARROWING_MODES[_env_choice("TORCHNEURON_64BIT", tuple(_NARROWING_MODES), "narrow")]
    )

    torch.utils.rename_privateuse1_backend("neuron")
    from . import neuron

    neuron._set_topology(topology)
    torch._register_device_module("neuron", neuron)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    from . import amp

    amp.install()


_register()
