"""A backward graph that failed to compile is released before the interpreter finalizes.

The backward of ``neuron`` tensors runs on the autograd engine's thread for the
device (``pt_autograd_<index>``). When our backward compile raises there, the
engine hands the error to the thread that called ``backward()`` and only then
drops its own reference to the failed graph task, whose stored Python exception
(traceback, frames, tensors) needs the GIL to be freed. If the script catches
the error and exits at once, that happens while Python finalizes: the device
thread is told to exit inside ``take_gil``, the unwind crosses a ``noexcept``
frame and the process aborts ("terminate called without an active exception",
exit code 134 instead of the script's own). An exit handler runs one trivial
backward on each device that had such a failure: the device thread processes
it after it has released the failed task, so nothing is left to free.
"""
from __future__ import annotations

import atexit

import torch

_devices: set[int] = set()


def note() -> None:
    """Called on the device's autograd thread when a backward graph fails to compile."""
    if not _devices:
        atexit.register(_drain)
    _devices.add(torch.neuron.current_device())


def _drain() -> None:
    for index in sorted(_devices):
        x = torch.zeros((), device=f"neuron:{index}", requires_grad=True)
        (x * 2).backward()  # queued behind the failed task on the same device thread
    _devices.clear()
