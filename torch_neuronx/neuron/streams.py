"""Streams and events on ``neuron``.

Kernels run synchronously on the host, so streams are always idle and events
complete when recorded; they still have distinct identities (FSDP2 juggles
several) and events measure real host time for ``elapsed_time``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .device_index import as_device as _device


class _NeuronKind(type):
    """``isinstance(x, torch.neuron.Stream)``: a torch object on a neuron device.

    PyTorch's C++ methods (``Event.elapsed_time``, ``Stream.wait_stream``) accept
    only exact ``torch.Event`` / ``torch.Stream`` objects, so the constructors
    below return those rather than subclass instances.
    """

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._torch_type) and obj.device.type == "neuron"


class Stream(metaclass=_NeuronKind):
    """``torch.Stream`` on the neuron device (``priority`` is accepted and ignored)."""

    _torch_type = torch.Stream

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs) -> torch.Stream:
        if "stream_id" in kwargs:  # re-creation from (stream_id, device_index, device_type)
            return torch.Stream(**kwargs)
        return torch.Stream(device=_device(device), priority=priority)


class Event(metaclass=_NeuronKind):
    """``torch.Event`` on the neuron device; ``elapsed_time`` is host time in ms."""

    _torch_type = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False, device: Any = None) -> torch.Event:
        return torch.Event(device=_device(device), enable_timing=enable_timing,
                           blocking=blocking, interprocess=interprocess)


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_device(device))


def default_stream(device: Any = None) -> torch.Stream:
    current = current_stream(device)
    return torch.Stream(stream_id=0, device_index=current.device_index,
                        device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Make ``stream`` current inside the block (``None`` is a no-op)."""
    if stream is None:
        yield
        return
    # Setting a stream also makes its device current; restore both, as
    # torch.cuda.stream does.
    previous_here = current_stream()
    previous_there = current_stream(stream.device)
    set_stream(stream)
    try:
        yield
    finally:
        set_stream(previous_there)
        set_stream(previous_here)
