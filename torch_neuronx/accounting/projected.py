"""The ``projection`` section of ``metrics()``: the projector fed by this process's run.

Eager kernels reach the projector through a signature listener: each new
kernel signature is queued (op, key and meta arguments) and projected once,
when a projection is next read, so neither the per-call path nor the step
that meets a new signature pays for projecting it; ``_C._signature_calls()``
supplies the call counts when the section is read. Compiled graphs are projected once each by the ``neuron`` backend
(:func:`add_graph`), which counts their executions here. Collectives come
from the process groups (``projection.COLLECTIVE_LOG``). Every figure is a
projection (``"label": "projected"``); see ``docs/projection.md``.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable

from .. import projection
from ..runtime.extension import _C
from ..runtime import metrics_registry as registry
from ..runtime.log import get_logger
from .device_work import note_graph
from .listeners import add_signature_listener

_log = get_logger("projection")
_graph_runs: Counter[str] = Counter()
_pending: list[tuple[str, str, tuple]] = []  # new signatures not projected yet
_lock = threading.Lock()
# the projection's own host cost: queueing signatures inside the run, projecting them when read
QUEUEING = registry.timer("projection.queueing_seconds",
                          "host seconds the signature listener adds to the ops that meet a new signature",
                          registry.HOST)
PROJECTING = registry.timer("projection.projecting_seconds",
                            "host seconds spent projecting queued kernel signatures (when a projection "
                            "is read) and compiled graphs (when compiled)", registry.HOST)


def _queue_signature(op: str, key: str, args: tuple) -> None:
    start = time.perf_counter()
    with _lock:
        _pending.append((op, key, args))
    QUEUEING.add_sample(time.perf_counter() - start)


def project_pending() -> None:
    """Project the signatures queued since the last read (each once; a failure is logged
    and leaves its calls under ``unprojected_calls``)."""
    with _lock:
        pending = _pending[:]
        _pending.clear()
    if not pending:
        return
    projector = projection.get_projector()
    start = time.perf_counter()
    for op, key, args in pending:
        try:
            projector.add_signature(op, key, args)
        except Exception as exc:  # a projection problem must never break reading the metrics
            _log.warning("signature of %s is not projected: %s: %s", op, type(exc).__name__, exc)
    PROJECTING.add_sample(time.perf_counter() - start)


def install(topology) -> None:
    """Project every new eager signature for the instance and LNC of ``topology``."""
    projection.configure(topology.profile, topology.lnc)
    add_signature_listener(_queue_signature)
    registry.register_source("projection", registry.Source(
        read=lambda: {f"graph_runs/{name}": n for name, n in graph_runs().items()},
        describe=lambda name: registry.labelled("executions of this compiled graph, each projected "
                                                "as one device program", registry.HOST),
        reset=reset))


def reconfigure(topology) -> None:
    """Another instance or LNC: a fresh projector (graphs compiled before are no longer
    counted; eager signatures change key with the target, so they are projected anew;
    queued ones are projected for the new target)."""
    if projection.target() == (topology.profile.name, topology.lnc):
        return
    projection.configure(topology.profile, topology.lnc)
    with _lock:
        _graph_runs.clear()


def add_graph(name: str, gm, example_inputs) -> Callable[[int], None]:
    """Project a compiled graph once; returns the function to call on each execution,
    with the time it was issued (Unix ns), which a recording profiler places on the
    device timeline.

    A graph the projection cannot trace is logged and left out (its runs are
    not counted), never failing the compile.
    """
    start = time.perf_counter()
    try:
        projection.get_projector().add_graph(name, gm, example_inputs)
    except Exception as exc:  # the projection must never break compilation
        _log.warning("graph %s is not projected: %s: %s", name, type(exc).__name__, exc)
        return lambda issued_ns: None
    finally:
        PROJECTING.add_sample(time.perf_counter() - start)

    def executed(issued_ns: int) -> None:
        with _lock:
            _graph_runs[name] += 1
        note_graph(name, issued_ns)
    return executed


def graph_runs() -> dict[str, int]:
    """Executions of each projected compiled graph since the last reset."""
    with _lock:
        return dict(_graph_runs)


def compiled_graphs() -> list[projection.GraphProgram]:
    """The distinct graphs the ``neuron`` backend compiled since the last reset, as the
    compile model sees them (read from the metrics registry: compile is a higher layer)."""
    if "compile.compiled_graphs" not in registry.record_names():
        return []
    unique = {g.graph_id: g for g in registry.records("compile.compiled_graphs")}
    return [projection.GraphProgram(g.graph_node_count, g.stablehlo_op_count) for g in unique.values()]


def section(steps: int = 1, price_per_hour: float | None = None) -> dict:
    """The projection of everything this process ran since the last reset, with the
    first-run compile of its distinct kernel signatures and graphs, and its cost
    (``steps`` runs of the whole; default one).

    Signatures the projector never saw (run before the listener was installed,
    or whose projection failed) are counted under ``unprojected_calls``.
    """
    project_pending()
    projector = projection.get_projector()
    calls = _C._signature_calls()
    known = {k: n for k, n in calls.items() if k in projector.kernels and n}
    data = projection.snapshot(calls=known, graph_runs=graph_runs(), eager_kernels=len(known),
                               graphs=compiled_graphs(), steps=steps, price_per_hour=price_per_hour)
    data["unprojected_calls"] = sum(calls.values()) - sum(known.values())
    return data


def mark() -> tuple[dict[str, int], dict[str, int]]:
    """The call and graph-run counts now, to project the work done after it (:func:`since`)."""
    return _C._signature_calls(), graph_runs()


def since(start: tuple[dict[str, int], dict[str, int]]) -> projection.WindowProjection:
    """The projection of the kernels and graphs run since ``start`` (a :func:`mark`;
    collectives are not included). Cheap enough to call between timed regions."""
    project_pending()
    projector = projection.get_projector()
    calls, runs = mark()
    known = {k: n - start[0].get(k, 0) for k, n in calls.items()
             if k in projector.kernels and n > start[0].get(k, 0)}
    ran = {g: n - start[1].get(g, 0) for g, n in runs.items() if n > start[1].get(g, 0)}
    return projector.window(known, ran)


def sequence(start: tuple[dict[str, int], dict[str, int]] | None = None) -> list:
    """The kernels and graphs run since ``start`` (a :func:`mark`; default: the last reset)
    for ``projection.chrome_trace``. Call order is not recorded (the per-call path stays
    untouched), so the timeline lists each signature's calls together, then the graphs."""
    before_calls, before_runs = start or ({}, {})
    project_pending()
    projector = projection.get_projector()
    calls, runs = mark()
    out: list = []
    for key, n in calls.items():
        if key in projector.kernels:
            out += [key] * (n - before_calls.get(key, 0))
    for name, n in runs.items():
        out += [("graph", name)] * (n - before_runs.get(name, 0))
    return out


def reset() -> None:
    """Forget graph executions and recorded collectives; projected signatures stay cached."""
    projection.COLLECTIVE_LOG.clear()
    with _lock:
        _graph_runs.clear()
