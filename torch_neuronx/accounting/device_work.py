"""Compiled graphs and collectives issued to the device, noted for ``torch.profiler``.

Eager kernels are noted by the C++ accounting itself (``csrc/profiler/DeviceTrace.h``);
a graph run and a collective are issued from Python, by layers above this one
(``compile``, ``distributed``), which call :func:`note_graph` and :func:`note_collective`.
Each is noted only while a profile with device activity records: one call to
``_C`` otherwise. The C++ note holds an integer; this module keeps what it stands
for (a graph's name, a ``CollectiveRecord``), for ``torch_neuronx.profiling`` to
read back with :func:`issued_work` when it places the notes on the device timeline.
"""
from __future__ import annotations

import threading

from ..runtime.extension import _C

GRAPH = 1  # DeviceWork::kGraph
COLLECTIVE = 2  # DeviceWork::kCollective

_items: list = []  # payload -> what was issued
_ids: dict = {}
_lock = threading.Lock()


def _payload(item) -> int:
    with _lock:
        found = _ids.get(item)
        if found is None:
            found = _ids[item] = len(_items)
            _items.append(item)
        return found


def note_graph(name: str, issued_ns: int) -> None:
    """A run of the compiled graph ``name`` (as ``accounting.projected`` counts it),
    issued at ``issued_ns`` (Unix ns, ``time.time_ns()``)."""
    if _C._device_trace_recording():
        _C._device_trace_note(GRAPH, _payload(name), issued_ns)


def note_collective(record, issued_ns: int) -> None:
    """A collective (a ``projection.CollectiveRecord``), issued at ``issued_ns``."""
    if _C._device_trace_recording():
        _C._device_trace_note(COLLECTIVE, _payload(record), issued_ns)


def issued_work(payload: int):
    """The graph name or ``CollectiveRecord`` a note of kind GRAPH or COLLECTIVE holds."""
    with _lock:
        return _items[payload]
