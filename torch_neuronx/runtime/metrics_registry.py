"""One registry of named counters and timers (torch_xla's ``metrics.h`` model).

Every figure the package counts is reachable here by name, whatever store it
lives in: Python counters and timers are created here by the layer that owns
them (``counter()``, ``timer()``); figures kept elsewhere (the C++ per-op
counts and host pool, the accounting object) are registered as *sources*,
callables read on demand; what is recorded rather than counted (compiled-graph
records, the collective log, eager lowering records) lives in *record logs*
(``record_log()``) or registered *stores*. ``clear_counters()`` clears counters,
sources, logs and stores together, so no figure outlives the records it counts;
``reset()`` also clears the timers: the one reset. Each entry says in its description whether it is a
**host measurement** (something this process really did or timed) or an
**emulated count** (what Trainium would have done). ``torch_neuronx.debug.metrics``
is the public facade; ``torch_neuronx.metrics()`` is a snapshot built from it.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Callable

HOST = "host measurement"
EMULATED = "emulated count"
_MAX_SAMPLES = 1024  # a timer keeps its latest samples, as torch_xla's circular buffer

_lock = threading.RLock()  # re-entrant: a Timer clears itself while being registered


def labelled(text: str, kind: str) -> str:
    """A description that ends with what kind of figure it is."""
    return f"{text} [{kind}]"


class Counter:
    """A named integer owned by Python code."""

    def __init__(self, name: str, text: str, kind: str):
        self.name, self.description = name, labelled(text, kind)
        self._value = 0

    def add(self, n: int = 1) -> None:
        with _lock:
            self._value += n

    @property
    def value(self) -> int:
        return self._value

    def clear(self) -> None:
        with _lock:
            self._value = 0


class Timer:
    """A named series of samples (seconds): count, sum and the latest samples."""

    def __init__(self, name: str, text: str, kind: str):
        self.name, self.description = name, labelled(text, kind)
        self.clear()

    def add_sample(self, seconds: float) -> None:
        with _lock:
            self._total += 1
            self._accumulator += seconds
            self._samples.append((time.time(), seconds))

    def data(self) -> tuple[int, float, list[tuple[float, float]]]:
        """(total samples, accumulator, [(wall time, value), ...]), as torch_xla's ``metric_data``."""
        with _lock:
            return self._total, self._accumulator, list(self._samples)

    def clear(self) -> None:
        with _lock:
            self._total, self._accumulator = 0, 0.0
            self._samples: collections.deque = collections.deque(maxlen=_MAX_SAMPLES)


@dataclasses.dataclass
class Source:
    """Counters whose values live elsewhere, read through ``read()`` (name -> value).

    ``describe(name)`` says what a counter is, ending with its kind
    (``labelled``). ``reset`` zeroes the store
    itself; without it, clearing remembers the current values as a baseline.
    ``gauges`` are levels (bytes held, a limit), not counts: never cleared.
    """

    read: Callable[[], dict[str, int]]
    describe: Callable[[str], str]
    reset: Callable[[], None] | None = None
    gauges: frozenset[str] = frozenset()
    baseline: dict[str, int] = dataclasses.field(default_factory=dict)

    def values(self) -> dict[str, int]:
        return {k: v - self.baseline.get(k, 0) for k, v in self.read().items()}

    def clear(self) -> None:
        if self.reset is not None:
            self.reset()
        else:
            self.baseline = {k: v for k, v in self.read().items() if k not in self.gauges}


class RecordLog:
    """A named list of records (e.g. one per compiled graph), cleared with the counters."""

    def __init__(self, name: str, text: str, kind: str):
        self.name, self.description = name, labelled(text, kind)
        self._items: list = []

    def append(self, item) -> None:
        with _lock:
            self._items.append(item)

    def items(self) -> list:
        with _lock:
            return list(self._items)

    def clear(self) -> None:
        with _lock:
            self._items.clear()


@dataclasses.dataclass
class Store:
    """Records kept by another layer (``read()`` returns them; ``reset()`` forgets them)."""

    read: Callable[[], object]
    reset: Callable[[], None]
    description: str


_counters: dict[str, Counter] = {}
_timers: dict[str, Timer] = {}
_sources: dict[str, Source] = {}
_logs: dict[str, RecordLog] = {}
_stores: dict[str, Store] = {}


def counter(name: str, text: str, kind: str) -> Counter:
    """The counter ``name``, created on first use."""
    with _lock:
        return _counters.setdefault(name, Counter(name, text, kind))


def timer(name: str, text: str, kind: str) -> Timer:
    with _lock:
        return _timers.setdefault(name, Timer(name, text, kind))


def record_log(name: str, text: str, kind: str) -> RecordLog:
    """The record log ``name``, created on first use."""
    with _lock:
        return _logs.setdefault(name, RecordLog(name, text, kind))


def register_store(name: str, read: Callable[[], object], reset: Callable[[], None], text: str,
                   kind: str) -> None:
    """Add (or replace) the store ``name``: records a layer keeps itself, cleared with the counters."""
    with _lock:
        _stores[name] = Store(read, reset, labelled(text, kind))


def records(name: str):
    """The records of log or store ``name`` (a list for a log, what ``read()`` returns for a store)."""
    if name in _logs:
        return _logs[name].items()
    if name in _stores:
        return _stores[name].read()
    raise KeyError(f"no record log or store named {name!r}")


def record_names() -> list[str]:
    return sorted([*_logs, *_stores])


def register_source(key: str, source: Source) -> None:
    """Add (or replace) the source ``key``; its counters' names must be unique."""
    with _lock:
        _sources[key] = source


def _source_values() -> dict[str, tuple[int, Source]]:
    out: dict[str, tuple[int, Source]] = {}
    for source in list(_sources.values()):
        for name, value in source.values().items():
            out[name] = (value, source)
    return out


def counter_names() -> list[str]:
    """Every counter with a non-zero value (as torch_xla: cleared counters disappear)."""
    names = [n for n, c in _counters.items() if c.value]
    names += [n for n, (v, _) in _source_values().items() if v]
    return sorted(names)


def counter_value(name: str) -> int | None:
    """The value of counter ``name``; None if no counter of that name exists."""
    if name in _counters:
        return _counters[name].value
    found = _source_values().get(name)
    return None if found is None else found[0]


def describe(name: str) -> str:
    """What counter or timer ``name`` measures, ending with its kind in brackets."""
    if name in _counters:
        return _counters[name].description
    if name in _timers:
        return _timers[name].description
    if name in _logs:
        return _logs[name].description
    if name in _stores:
        return _stores[name].description
    found = _source_values().get(name)
    if found is None:
        raise KeyError(f"no counter or timer named {name!r}")
    return found[1].describe(name)


def counters(prefix: str = "") -> dict[str, int]:
    """Every counter whose name starts with ``prefix``, zero or not (for snapshots)."""
    out = {n: c.value for n, c in _counters.items() if n.startswith(prefix)}
    out.update({n: v for n, (v, _) in _source_values().items() if n.startswith(prefix)})
    return out


def metric_names() -> list[str]:
    return sorted(n for n, t in _timers.items() if t.data()[0])


def metric_data(name: str) -> tuple[int, float, list[tuple[float, float]]] | None:
    timer_ = _timers.get(name)
    return None if timer_ is None else timer_.data()


def clear_counters() -> None:
    """Zero every counter and source and forget every record log and store."""
    for c in list(_counters.values()):
        c.clear()
    for s in list(_sources.values()):
        s.clear()
    for log in list(_logs.values()):
        log.clear()
    for store in list(_stores.values()):
        store.reset()


def clear_metrics() -> None:
    """Forget every timer's samples."""
    for t in list(_timers.values()):
        t.clear()


def reset() -> None:
    """The one reset: counters, sources, record logs, stores and timers."""
    clear_counters()
    clear_metrics()


def report() -> str:
    """Every non-zero counter and timer, one per line, with what it measures."""
    lines = []
    for name in metric_names():
        total, acc, _ = metric_data(name)
        lines.append(f"Metric: {name}\n  TotalSamples: {total}\n  Accumulator: {acc:.6f}s\n"
                     f"  Mean: {acc / total:.6f}s\n  ({describe(name)})")
    for name in counter_names():
        lines.append(f"Counter: {name}\n  Value: {counter_value(name)}\n  ({describe(name)})")
    return "\n".join(lines) + ("\n" if lines else "")
