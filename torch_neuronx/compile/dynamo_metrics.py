"""Compile metrics of ``backend="neuron"``, named as in the real product.

``get_dynamo_metrics()`` answers the questions a Trainium user asks about
compilation: how many graphs were compiled and why recompiled, where the
graph broke, how long compiling took compared with running, and how often
the persistent cache saved a compile. The counts and times are entries of the
metrics registry (``torch_neuronx.debug.metrics``). Kept free of Dynamo imports
so that ``torch_neuronx`` can re-export it without slowing ``import torch``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..runtime import metrics_registry as registry


@dataclasses.dataclass
class GraphRecord:
    """One Dynamo graph handed to the backend."""

    compile_id: str
    inputs: list[str]
    recompile: bool
    graph_break_reason: str | None
    compile_seconds: float = 0.0


@dataclasses.dataclass
class NeuronCompilationMetrics:
    """One forward/backward/inference graph, with the real product's field names.

    ``torch_neuronx_*_us`` are **host measurements** on the emulator
    (``torch_neuronx_compile_us`` times Inductor's code generation, not
    neuronx-cc); ``estimated_compile_s`` is the projection of neuronx-cc time
    (``projection.graph_compile_seconds``; 0 when the graph key was already in the
    in-memory or persistent cache).
    """

    graph_id: str  # the graph key: sha256 of the StableHLO text, I/O shapes/dtypes, compiler suffix
    graph_name: str  # {model_name}_{aot_id}_{forward|backward|inference}_{n}
    model_name: str
    has_collectives: bool
    graph_node_count: int
    timestamp: float
    torch_neuronx_fx_passes_us: float = 0.0
    torch_neuronx_lower_us: float = 0.0
    torch_neuronx_compile_us: float = 0.0
    stablehlo_op_count: int | None = None  # None: not lowered (torch-mlir absent or the graph fell back)
    lowering: str = "not checked"  # "lowered" | "not checked" (torch-mlir absent, or failed naming no op)
    neff_cache: str = "compiled"  # "compiled" | "memory hit" | "disk hit"
    estimated_compile_s: float = 0.0
    timings: str = "host"


class _Metrics:
    """The graph records and fallback messages (record logs of the metrics registry, so
    ``clear_counters()`` forgets them with the counts), plus the compile counters and timers."""

    def __init__(self) -> None:
        self.graph_log = registry.record_log(
            "compile.graphs", "Dynamo graphs handed to the neuron backend", registry.HOST)
        self.compiled_graph_log = registry.record_log(
            "compile.compiled_graphs", "forward/backward/inference graphs compiled (NeuronCompilationMetrics)",
            registry.HOST)
        self.fallback_log = registry.record_log(
            "compile.fallbacks", "graphs the backend ran on the host instead, with why", registry.HOST)
        self.aot_graphs = registry.counter(
            "compile.aot_graphs_compiled", "forward/backward/inference graphs given to the code generator",
            registry.HOST)
        self.cache_hits = registry.counter(
            "compile.cache_hits", "compiled graphs found in the persistent compile cache", registry.HOST)
        self.cache_misses = registry.counter(
            "compile.cache_misses", "compiled graphs not found in the persistent compile cache", registry.HOST)
        self.compile_time = registry.timer(
            "compile.compile_seconds", "host time compiling graphs (Dynamo graph and later backward graphs)",
            registry.HOST)
        self.execution_time = registry.timer(
            "compile.execution_seconds", "host time running compiled graphs", registry.HOST)

    @property
    def graphs(self) -> list[GraphRecord]:
        return self.graph_log.items()

    @property
    def compiled_graphs(self) -> list[NeuronCompilationMetrics]:
        return self.compiled_graph_log.items()

    @property
    def fallbacks(self) -> list[str]:
        return self.fallback_log.items()

    def add_execution(self, seconds: float) -> None:
        self.execution_time.add_sample(seconds)

    def add_compile(self, seconds: float, hits: int, misses: int) -> None:
        self.aot_graphs.add()
        if seconds:
            self.compile_time.add_sample(seconds)
        self.cache_hits.add(hits)
        self.cache_misses.add(misses)

    def add_graph(self, record: GraphRecord) -> None:
        self.graph_log.append(record)
        self.compile_time.add_sample(record.compile_seconds)

    def add_compiled_graph(self, record: NeuronCompilationMetrics) -> None:
        self.compiled_graph_log.append(record)

    def add_fallback(self, message: str) -> None:
        self.fallback_log.append(message)

    def clear(self) -> None:
        for log in (self.graph_log, self.compiled_graph_log, self.fallback_log):
            log.clear()
        for c in (self.aot_graphs, self.cache_hits, self.cache_misses):
            c.clear()
        self.compile_time.clear()
        self.execution_time.clear()


METRICS = _Metrics()


def _recompile_reasons(records: list[GraphRecord]) -> dict[str, str]:
    """Dynamo's reason (the guard that failed) per recompiled graph's compile id."""
    wanted = {r.compile_id for r in records if r.recompile}
    if not wanted:
        return {}
    from torch._dynamo.utils import get_compilation_metrics

    return {
        str(m.compile_id): m.recompile_reason
        for m in get_compilation_metrics()
        if str(m.compile_id) in wanted and m.recompile_reason
    }


def get_dynamo_metrics() -> dict[str, Any]:
    """A snapshot of everything compiled by ``backend="neuron"`` since the last reset.

    ``graphs_compiled`` counts Dynamo graphs (one per graph-break segment and
    per input shape); ``aot_graphs_compiled`` counts the forward, backward and
    inference graphs given to the code generator; ``cache_hits``/``cache_misses``
    are persistent-cache lookups of those graphs. ``compiled_graphs`` holds one
    :class:`NeuronCompilationMetrics` (as a dict) per such graph: the list the
    real ``get_dynamo_metrics()`` returns.
    """
    graphs, fallbacks, compiled_graphs = METRICS.graphs, METRICS.fallbacks, METRICS.compiled_graphs
    _, compile_seconds, _ = METRICS.compile_time.data()
    executions, execution_seconds, _ = METRICS.execution_time.data()
    reasons = _recompile_reasons(graphs)
    recompiles = [
        {"compile_id": g.compile_id, "reason": reasons.get(g.compile_id, "unknown"), "inputs": g.inputs}
        for g in graphs
        if g.recompile
    ]
    breaks = [
        {"compile_id": g.compile_id, "reason": g.graph_break_reason}
        for g in graphs
        if g.graph_break_reason is not None
    ]
    return {
        "graphs_compiled": len(graphs),
        "aot_graphs_compiled": METRICS.aot_graphs.value,
        "recompilations": len(recompiles),
        "recompile_reasons": recompiles,
        "graph_breaks": len(breaks),
        "graph_break_reasons": breaks,
        "compile_seconds": compile_seconds,
        "execution_seconds": execution_seconds,
        "executions": executions,
        "cache_hits": METRICS.cache_hits.value,
        "cache_misses": METRICS.cache_misses.value,
        "fallbacks": fallbacks,
        "graphs": [dataclasses.asdict(g) for g in graphs],
        "compiled_graphs": [dataclasses.asdict(g) for g in compiled_graphs],
        "stablehlo_ops": sum(g.stablehlo_op_count or 0 for g in compiled_graphs),
        "estimated_compile_seconds": sum(g.estimated_compile_s for g in compiled_graphs),
    }


def reset_dynamo_metrics() -> None:
    """Forget all counts (compiled graphs stay compiled and cached)."""
    METRICS.clear()
