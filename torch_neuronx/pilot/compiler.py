"""The graph compiler for a mode, and the metrics that explain its cost.

Two sources: the accounting layer (``torch_neuronx.metrics()``: per-shape eager
kernel compilations, NEFF cache hits, an *estimated* neuronx-cc time) and the
compile metrics (``torch_neuronx.get_dynamo_metrics()``: graphs, recompiles
with reasons, graph breaks, compile vs execution seconds, cache hits). Dynamo's
own counters are recorded for any backend, so ``--device cuda`` gets graph
counts too; the accounting layer's counts applies to ``neuron`` only, and other devices
get "not available" with the reason.
"""
from __future__ import annotations

import contextlib

import torch

from .. import accounting
from ..compile import get_dynamo_metrics, reset_dynamo_metrics


def backend_for(device: torch.device) -> str:
    """``neuron`` on the neuron device, Inductor everywhere else."""
    return "neuron" if device.type == "neuron" else "inductor"


def backend_unavailable(backend: str) -> str | None:
    """Why ``torch.compile(backend=...)`` cannot be used here, or None when it can."""
    from torch._dynamo.backends.registry import lookup_backend

    try:
        lookup_backend(backend)
    except Exception as exc:  # a missing module or a broken install: both mean "not available"
        return f"torch.compile backend {backend!r} is not available ({type(exc).__name__}: {exc})"
    return None


@contextlib.contextmanager
def compiled_forward(model, backend: str):
    """Route ``model``'s forward (and so ``generate``) through ``torch.compile`` for the block."""
    model.forward = torch.compile(model.forward, backend=backend)
    try:
        yield model
    finally:
        del model.forward  # the class's forward is visible again
        torch._dynamo.reset()


def fidelity_metrics(device: torch.device) -> dict:
    """``torch_neuronx.metrics()`` (without the long op lists), or why it does not apply."""
    if device.type != "neuron":
        return {"available": False, "reason": f"per-shape compilation accounting applies to neuron, not {device.type}"}
    snap = dict(accounting.metrics())
    snap["executed_op_count"] = len(snap.pop("executed_ops", []) or [])
    snap["available"] = True
    return snap


def signature_keys(device: torch.device) -> set[str]:
    """The kernel signatures run since the last metrics reset (neuron only: elsewhere none)."""
    if device.type != "neuron":
        return set()
    from ..runtime.extension import _C

    return {key for key, n in _C._signature_calls().items() if n}


def projected_compile(device: torch.device, eager_sizes: list[int | None], dynamo: dict | None) -> dict | None:
    """The projected first-run (empty NEFF cache) compile of a mode (projection's one model), or
    None off the neuron device: one program per distinct kernel signature — sized by its
    StableHLO where it was lowered (``eager_sizes``: each signature's op count, None if not
    lowered), else a one-kernel program — and one per graph the neuron backend compiled.
    ``eager_kernels`` and ``graphs`` count the signatures and the torch.compile graphs."""
    if device.type != "neuron":
        return None
    from torch_neuronx.projection import GraphProgram, get_projector

    graphs = [GraphProgram(g["graph_node_count"], g["stablehlo_op_count"])
              for g in ((dynamo or {}).get("neuron_backend") or {}).get("compiled_graphs", [])]
    lowered = [GraphProgram(1, ops) for ops in eager_sizes if ops is not None]
    projected = get_projector().compile(eager_kernels=sum(ops is None for ops in eager_sizes),
                                        graphs=lowered + graphs).to_dict()
    return {**projected, "eager_kernels": len(eager_sizes), "graphs": len(graphs)}


def reset_fidelity() -> None:
    accounting.reset_metrics()


def dynamo_metrics() -> dict:
    """The neuron backend's compile metrics when present, plus Dynamo's backend-neutral counters."""
    from torch._dynamo.utils import counters

    data = {
        "dynamo_unique_graphs": int(counters["stats"]["unique_graphs"]),
        "dynamo_graph_breaks": {str(k): int(v) for k, v in counters["graph_break"].items()},
    }
    snap = dict(get_dynamo_metrics())
    snap.pop("graphs", None)
    data["neuron_backend"] = {"available": True, **snap}
    return data


def reset_dynamo() -> None:
    from torch._dynamo.utils import counters

    counters.clear()
    reset_dynamo_metrics()
