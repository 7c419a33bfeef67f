"""Named counters and timers of the whole package, as ``torch_xla.debug.metrics``.

Counters: kernel calls and per-op calls (host measurements), compile misses
and NEFF cache hits (emulated counts), compiled graphs and compile-cache
lookups, the host memory pool. Timers: graph compile and execution times.
Records: compiled-graph records, the collective log, eager lowering records
(``records(name)``). ``describe(name)`` says what a figure measures and whether
it is a host measurement or an emulated count. ``clear_counters()`` forgets
counters and records together; ``reset()`` clears timers too.
"""
from __future__ import annotations

from ..runtime.metrics_registry import (  # noqa: F401  (the public facade)
    clear_counters,
    clear_metrics,
    counter_names,
    counter_value,
    describe,
    metric_data,
    metric_names,
    record_names,
    records,
    reset,
)
from ..runtime.metrics_registry import report as metrics_report  # noqa: F401
