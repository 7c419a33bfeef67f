"""Compile metrics of ``backend="neuron"``, named as in the real product.

``get_dynamo_metrics()`` answers the questions a Trainium user asks about
compilation: how many graphs were compiled and why recompiled, where the
graph broke, how long compiling took compared with running, and how often
the persistent cache saved a compile. Kept free of Dynamo imports so that
``torch_neuronx`` can re-export it without slowing ``import torch``.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any


@dataclasses.dataclass
class GraphRecord:
    """One Dynamo graph handed to the backend."""

    compile_id: str
    inputs: list[str]
    recompile: bool
    graph_break_reason: str | None
    compile_seconds: float = 0.0


# Projection of neuronx-cc time for one graph from its size (uncalibrated; see docs/compile.md).
GRAPH_COMPILE_BASE_S = 2.0
GRAPH_COMPILE_S_PER_STABLEHLO_OP = 0.01


def estimated_compile_seconds(stablehlo_ops: int | None) -> float:
    """``base + per_op * ops``: the projected neuronx-cc time of a graph that is compiled."""
    return GRAPH_COMPILE_BASE_S + GRAPH_COMPILE_S_PER_STABLEHLO_OP * (stablehlo_ops or 0)


@dataclasses.dataclass
class NeuronCompilationMetrics:
    """One forward/backward/inference graph, with the real product's field names.

    ``torch_neuronx_*_us`` are **host measurements** on the emulator
    (``torch_neuronx_compile_us`` times Inductor's code generation, not
    neuronx-cc); ``estimated_compile_s`` is the projection of neuronx-cc time
    (0 when the graph key was already in the in-memory or persistent cache).
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


@dataclasses.dataclass
class _Metrics:
    graphs: list[GraphRecord] = dataclasses.field(default_factory=list)
    compiled_graphs: list[NeuronCompilationMetrics] = dataclasses.field(default_factory=list)
    aot_graphs_compiled: int = 0
    compile_seconds: float = 0.0
    execution_seconds: float = 0.0
    executions: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def add_execution(self, seconds: float) -> None:
        with self.lock:
            self.execution_seconds += seconds
            self.executions += 1

    def add_compile(self, seconds: float, hits: int, misses: int) -> None:
        with self.lock:
            self.aot_graphs_compiled += 1
            self.compile_seconds += seconds
            self.cache_hits += hits
            self.cache_misses += misses


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
    with METRICS.lock:
        graphs = list(METRICS.graphs)
        snapshot = {f.name: getattr(METRICS, f.name) for f in dataclasses.fields(METRICS) if f.name != "lock"}
        snapshot["fallbacks"] = list(METRICS.fallbacks)
        snapshot["compiled_graphs"] = list(METRICS.compiled_graphs)
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
        "aot_graphs_compiled": snapshot["aot_graphs_compiled"],
        "recompilations": len(recompiles),
        "recompile_reasons": recompiles,
        "graph_breaks": len(breaks),
        "graph_break_reasons": breaks,
        "compile_seconds": snapshot["compile_seconds"],
        "execution_seconds": snapshot["execution_seconds"],
        "executions": snapshot["executions"],
        "cache_hits": snapshot["cache_hits"],
        "cache_misses": snapshot["cache_misses"],
        "fallbacks": snapshot["fallbacks"],
        "graphs": [dataclasses.asdict(g) for g in graphs],
        "compiled_graphs": [dataclasses.asdict(g) for g in snapshot["compiled_graphs"]],
        "stablehlo_ops": sum(g.stablehlo_op_count or 0 for g in snapshot["compiled_graphs"]),
        "estimated_compile_seconds": sum(g.estimated_compile_s for g in snapshot["compiled_graphs"]),
    }


def reset_dynamo_metrics() -> None:
    """Forget all counts (compiled graphs stay compiled and cached)."""
    with METRICS.lock:
        METRICS.graphs.clear()
        METRICS.compiled_graphs.clear()
        METRICS.fallbacks.clear()
        METRICS.aot_graphs_compiled = METRICS.executions = 0
        METRICS.cache_hits = METRICS.cache_misses = 0
        METRICS.compile_seconds = METRICS.execution_seconds = 0.0
