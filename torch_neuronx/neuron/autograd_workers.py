"""At exit, the autograd engine's ``neuron`` worker threads hold no graph task.

The backward of ``neuron`` tensors runs on one engine worker per device index
(``pt_autograd_<index>``), which drops its reference to a finished graph task
after the caller of ``backward()`` has moved on. A graph task holds Python
objects (the caller's ``contextvars`` context, which PyTorch stashes for every
backward, and a failed task's error), so when a script exits right after a
backward the worker could free them while Python finalizes: the process then
aborted ("terminate called without an active exception", exit code 134) instead
of returning the script's own code, in one run of a few on a busy machine. The
exit handler queues a one-node backward behind each used device's work and
waits for it (C++: ``runtime/AutogradWorkers.cpp``).
"""
from __future__ import annotations

import atexit
import os

from ..runtime import log
from ..runtime.extension import _C


def install() -> None:
    """Register the exit handler; called before handlers that must run first (the metrics export)."""
    atexit.register(_settle_at_exit)


def engine_workers_started() -> bool:
    """Whether the engine started its device workers (at a process's first backward of any kind).

    Read from the thread names: a process that never ran a backward is left as it is, rather
    than starting threads at exit. Where ``/proc`` cannot tell, assume they run."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return True
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if comm.read().startswith("pt_autograd_"):
                    return True
        except OSError:  # the thread ended meanwhile
            continue
    return False


def used_devices() -> list[int]:
    """Devices that held memory: a worker runs backward nodes of its device's tensors only."""
    from .memory import memory_stats

    return [index for index in range(_C._device_count())
            if memory_stats(index).get("allocation.all.allocated", 0) > 0]


def settle(devices: list[int]) -> None:
    """Return once each device's worker has finished and dropped every graph task queued before."""
    _C._settle_autograd_workers(devices)


def _settle_at_exit() -> None:
    if not _C._is_initialized() or _C._in_bad_fork() or not engine_workers_started():
        return
    try:
        settle(used_devices())
    except Exception as exc:  # exiting anyway: report, never mask the exit status
        log.get_logger("autograd").warning("settling the autograd workers at exit failed: %s", exc)
