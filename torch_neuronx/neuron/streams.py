"""Streams and events on ``neuron``.

Kernels run synchronously on the host, so streams are always idle and events
complete when recorded; they still have distinct identities (FSDP2 juggles
several) and events measure real host time for ``elapsed_time``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch


def _device(device: Any) -> torch.device:
    from . import _index

    return torch.device("neuron", _index(device))


class Stream(torch.Stream):
    """``torch.Stream`` on the neuron device (``priority`` is accepted and ignored)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # re-creation from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_device(device), priority=priority)


class Event(torch.Event):
    """``torch.Event`` on the neuron device; ``elapsed_time`` is host time in ms."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False, device: Any = None):
        return super().__new__(cls, device=_device(device), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_device(device))


def default_stream(device: Any = None) -> torch.Stream:
    dev = _device(device)
    return torch.Stream(stream_id=0, device_index=dev.index, device_type=dev.type)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Make ``stream`` current inside the block (``None`` is a no-op)."""
    if stream is None:
        yield
        return
    previous = current_stream(stream.device)
    set_stream(stream)
    try:
        yield
    finally:
        set_stream(previous)
