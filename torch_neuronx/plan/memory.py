"""One rank's HBM: parameters, gradients and optimizer state by data-parallel sharding and
pipeline stage, the traced activation peak, collective buffers, the serving KV cache, what the
device's caching allocator adds to the long-lived tensors (``rank_tensors.py``), and the runtime's
reserve, against the logical core's capacity."""
from __future__ import annotations

import dataclasses
import math

from ..runtime.profiles import GiB
from .context import PlanContext
from .rank_tensors import allocator_overhead
from .request import Layout

RUNTIME_RESERVE_BYTES = 1 * GiB  # assumed: Neuron runtime, NEFFs and scratch per core; no published figure
LABEL = ("emulated (traced on fake tensors; long-lived tensors placed by the device's allocator); "
         "runtime_reserve assumed")


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Per-rank HBM in bytes by kind (emulated; the reserve assumed)."""

    bytes: dict[str, float]
    hbm_bytes: float
    other_checkpointing: dict[str, float]  # the activation peak with checkpointing toggled (training)
    padding_bytes: float = 0.0  # what the padded heads and rows add to the parameters (already in ``bytes``)

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.hbm_bytes

    def to_dict(self) -> dict:
        return {"label": LABEL, "bytes": dict(self.bytes), "total_bytes": self.total_bytes,
                "hbm_bytes": self.hbm_bytes, "fits": self.fits, "padding_bytes": self.padding_bytes,
                **self.other_checkpointing}


def activations(ctx: PlanContext, layout: Layout, checkpointing: bool) -> float:
    """Peak activations of the stage: one micro-batch through its layers, plus the saved
    activations of the other micro-batches a 1F1B first stage holds in flight (min(P, m))."""
    t = ctx.traced(layout.tp, layout.batch, checkpointing, layout.lnc)
    layers = ctx.config.num_hidden_layers // layout.pp
    in_flight = min(layout.pp, layout.micro_batches) if ctx.train else 1
    return t.activations(layers) + (in_flight - 1) * layers * t.per_layer_activations()


def _training(ctx: PlanContext, layout: Layout) -> dict[str, float]:
    item = ctx.job.dtype.itemsize
    stage = ctx.stage_parameters(layout)
    if layout.shard == "fsdp" and layout.pp == 1:
        sharded = ctx.parameters(layout.tp, layout.dp).per_rank  # exact, with FSDP2's padding
    else:
        sharded = math.ceil(stage / layout.dp) if layout.shard != "none" else stage
    held = sharded if layout.shard == "fsdp" else stage  # parameters and gradients
    gathered = ctx.parameters(layout.tp, 1).layer_unsharded * item if layout.shard == "fsdp" and layout.dp > 1 else 0
    return {"parameters": held * item, "gradients": held * item,
            "optimizer_state": 2 * sharded * item,  # AdamW exp_avg + exp_avg_sq
            "activations_peak": activations(ctx, layout, layout.checkpointing),
            # FSDP2: the current and the prefetched layer gathered, plus one layer's unsharded gradients
            "collective_buffers": 3 * gathered, "runtime_reserve": RUNTIME_RESERVE_BYTES}


def _serving(ctx: PlanContext, layout: Layout) -> dict[str, float]:
    """A replica's rank: the whole TP-sharded model (every replica holds its own copy), the static
    KV cache of ``max_len`` positions allocated up front, the traced activation peak."""
    cache = {"kv_cache": ctx.kv_cache_bytes(layout, ctx.max_len)} if ctx.kind == "decoder" else {}
    return {"parameters": ctx.weight_bytes(layout.tp), **cache,
            "activations_peak": activations(ctx, layout, False), "runtime_reserve": RUNTIME_RESERVE_BYTES}


def memory(ctx: PlanContext, layout: Layout) -> MemoryPlan:
    """Per-rank HBM by kind, against the logical core's HBM."""
    parts = _training(ctx, layout) if ctx.train else _serving(ctx, layout)
    parts.update(allocator_overhead(ctx, layout))
    other = {}
    if ctx.train:
        key = ("activations_peak_without_checkpointing" if layout.checkpointing
               else "activations_peak_with_checkpointing")
        other[key] = activations(ctx, layout, not layout.checkpointing)
    return MemoryPlan(parts, ctx.profile.hbm_per_logical_core(layout.lnc), other, _padding(ctx, layout, parts))


def _padding(ctx: PlanContext, layout: Layout, parts: dict[str, float]) -> float:
    """What the padded heads add: their share of the parameters and of the KV cache."""
    item = ctx.job.dtype.itemsize if ctx.train else ctx.weight_dtype.itemsize
    weights = ctx.parameters(layout.tp, 1).padding_tp_local * item
    heads = ctx.heads(layout.tp)
    if not heads or not parts.get("kv_cache"):
        return weights
    return weights + parts["kv_cache"] * heads.zero_kv_heads / heads.padded_kv_heads
