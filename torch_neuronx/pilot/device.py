"""The device under test: parse it, check it exists, and optionally resize its cores."""
from __future__ import annotations

import torch

from .config import PilotError

GiB = 1024**3


def resolve_device(name: str) -> torch.device:
    """``neuron``, ``cpu``, ``cuda:1``…: any PyTorch device that is present in this process."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise PilotError("bad_input", f"--device {name!r} is not a PyTorch device name") from None
    if device.type == "cpu":
        return device
    if device.type == "neuron":
        torch.neuron.topology()  # an environment variable the device cannot use: its ConfigError, by name
    module = getattr(torch, device.type, None)
    if module is None or not module.is_available():
        raise PilotError("device_unavailable", f"device {device.type!r} is not available in this process")
    count = module.device_count()
    index = device.index if device.index is not None else module.current_device()
    if not 0 <= index < count:
        raise PilotError("device_unavailable", f"{name} does not exist: {count} {device.type} device(s) visible")
    return torch.device(device.type, index)


def is_emulated(device: torch.device) -> bool:
    """The neuron device of this package runs on the host CPU."""
    return device.type == "neuron"


def set_core_capacity(gib: float) -> None:
    """Emulate NeuronCores with ``gib`` GiB of HBM each (a what-if for smaller cores).

    What an earlier run in this process left is released first (unreachable tensors, then the
    caching allocator's free segments): it is not the what-if core's, and its segments' free room
    would serve allocations that the smaller core could not hold."""
    import gc

    import torch

    import torch_neuronx

    gc.collect()
    torch.neuron.empty_cache()
    torch_neuronx.reconfigure(hbm_per_core=int(gib * GiB))


def use_instance(name: str) -> None:
    """Switch this process to instance profile ``name`` before any device memory is used.

    ``torch_neuronx.reconfigure`` sets the cores, HBM per core and the kernel
    signatures' target, and exports ``TORCHNEURON_INSTANCE`` so that the
    pilot's fresh processes see the same instance.
    """
    import torch_neuronx

    torch_neuronx.reconfigure(instance=name)
