"""Which logical NeuronCore a ``device`` argument names: the one helper every
``torch.neuron`` function uses to read an int / str / ``torch.device`` / None."""
from __future__ import annotations

from typing import Any

import torch

from ..runtime.extension import _C


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def index(device: Any = None) -> int:
    """Normalise an int / str / torch.device / None to a checked core index."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device, got {device}")
        if device.index is None:
            return current_device()
        device = device.index
    if not isinstance(device, int):
        raise TypeError(f"Invalid device {device!r}: expected an int, str or torch.device")
    count = device_count()
    if not 0 <= device < count:
        raise RuntimeError(
            f"Invalid neuron device index {device}: this process sees {count} logical "
            f"NeuronCore(s) (valid indices 0..{count - 1})."
        )
    return device


def as_device(device: Any = None) -> torch.device:
    """``torch.device("neuron", index(device))``."""
    return torch.device("neuron", index(device))
