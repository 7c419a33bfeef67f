"""Memory history and snapshots of the emulated cores, in PyTorch's format.

``torch.neuron.memory._record_memory_history`` / ``_snapshot`` / ``_dump_snapshot``
take the arguments of their ``torch.cuda.memory`` namesakes and produce the same
dictionary (``segments`` with their ``blocks``, ``device_traces`` of allocator events
with the Python frames of each), so PyTorch's memory visualiser draws it unchanged:
``torch.cuda._memory_viz.trace_plot(snapshot)`` (memory over time) and
``segment_plot(snapshot)`` (the allocator's segments) write HTML pages, and
pytorch.org/memory_viz opens a dumped file. As for CUDA, a snapshot taken with the
history off still has every segment and block, but no events and no frames.
Addresses are emulated device addresses, one range per core; sizes are emulated
counts (csrc/runtime/AllocatorPools.cpp).
"""
from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from ..runtime.extension import _C
from ..runtime.staged_files import unwritable_reason, write_bytes_whole

_ENABLED = (None, "state", "all")
# c10's RecordContext: which stacks are kept.
_CONTEXTS = {None: 0, "state": 1, "alloc": 2, "all": 3}
_STACKS = ("python", "all")


def _record_memory_history(
    enabled: str | bool | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
    **_unused: Any,
) -> None:
    """Start or stop recording the allocator's history (all cores; ``device`` is accepted
    and ignored, as for CUDA).

    ``enabled``: ``None`` stops and forgets the history; ``"state"`` keeps the stacks of
    live blocks only; ``"all"`` also keeps every allocation, free and segment event (the
    newest ``max_entries`` per core). ``context``: which stacks to keep (``None``,
    ``"state"``, ``"alloc"``, ``"all"``); ``stacks``: ``"python"`` frames, or ``"all"`` to add
    C++ frames (slower to turn into frames at snapshot time). ``True`` / ``False`` are
    accepted for ``enabled``, as PyTorch's older signature. Other keyword arguments of the
    CUDA version (``compile_context``, ``skip_actions``, ...) are accepted and ignored.
    """
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    if enabled not in _ENABLED:
        raise ValueError(f"_record_memory_history: enabled must be one of {_ENABLED}, got {enabled!r}")
    if context not in _CONTEXTS:
        raise ValueError(f"_record_memory_history: context must be one of {tuple(_CONTEXTS)}, got {context!r}")
    if stacks not in _STACKS:
        raise ValueError(f"_record_memory_history: stacks must be one of {_STACKS}, got {stacks!r}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"_record_memory_history: max_entries must be an int >= 1, got {max_entries!r}")
    level = _CONTEXTS[context] if enabled is not None else 0
    if enabled == "state":
        level = min(level, _CONTEXTS["state"])
    _C._record_memory_history(enabled == "all", level, stacks == "all",
                              min(max_entries, sys.maxsize), bool(clear_history))


def _snapshot(device: Any = None) -> dict[str, Any]:
    """The allocator state of every core, in ``torch.cuda.memory._snapshot()``'s format:
    ``{"segments": [...], "device_traces": [[events of core 0], ...]}`` (events only while
    the history records them). ``device`` is accepted and ignored, as for CUDA."""
    return _C._memory_snapshot()


def memory_snapshot() -> list[dict[str, Any]]:
    """Every core's segments, as ``torch.cuda.memory_snapshot()``."""
    return _snapshot()["segments"]


def _dump_snapshot(filename: str | os.PathLike = "dump_snapshot.pickle") -> None:
    """Write ``_snapshot()`` pickled to ``filename`` (the file pytorch.org/memory_viz and
    ``python -m torch.cuda._memory_viz`` read), whole or not at all. A path that cannot be
    written raises ``OSError`` naming it, before the snapshot is taken."""
    reason = unwritable_reason(filename)
    if reason is not None:
        raise OSError(f"_dump_snapshot: {os.fspath(filename)!r} {reason}; pass a file path in a "
                      "writable directory")
    write_bytes_whole(filename, pickle.dumps(_snapshot()))
