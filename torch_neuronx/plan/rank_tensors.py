"""One rank's long-lived tensors one by one, and what the device's caching allocator adds to them.

The memory plan sums bytes by kind; on the device each tensor is a block rounded up to a size class
and blocks are placed in segments (``csrc/runtime/AllocatorSizes.h``). The plan asks the allocator
itself (``torch.neuron.memory.layout_bytes``: the same code every core runs) what it would hold
for the tensors a rank keeps for the whole step, allocated in order and never freed, so the plan's
total is what the device would reserve for them. Activations are sized by the trace as a total
and stay unrounded.
"""
from __future__ import annotations

from ..neuron.memory import layout_bytes
from .context import PlanContext
from .request import Layout
from .sharding import RankTensor, fsdp_local_numel


def _stage(ctx: PlanContext, layout: Layout) -> list[RankTensor]:
    """The largest pipeline stage's parameters in the model's order, as
    ``PlanContext.stage_parameters`` counts them: its share of the layers plus everything outside
    the layers."""
    layers = ctx.config.num_hidden_layers // layout.pp
    return [t for t in ctx.parameters(layout.tp, 1).tensors if t.layer is None or t.layer < layers]


def _training(ctx: PlanContext, layout: Layout) -> list[int]:
    """Parameters, then gradients, then AdamW's two moments (each sharded over data
    parallelism as the layout says, FSDP2-padded per tensor)."""
    item = ctx.job.dtype.itemsize
    stage = _stage(ctx, layout)
    sharded = [fsdp_local_numel(t.shape, layout.dp) if layout.shard != "none" else t.numel for t in stage]
    held = sharded if layout.shard == "fsdp" else [t.numel for t in stage]
    return [n * item for n in held] * 2 + [n * item for n in sharded for _moment in range(2)]


def _serving(ctx: PlanContext, layout: Layout) -> list[int]:
    """The TP rank's weights (projections in the weight dtype), then one key and one value cache
    tensor per layer."""
    weights = [t.numel * (ctx.weight_dtype.itemsize if t.matmul else ctx.job.dtype.itemsize)
               for t in ctx.parameters(layout.tp, 1).tensors]
    caches = 2 * ctx.config.num_hidden_layers
    cache = ctx.kv_cache_bytes(layout, ctx.max_len) // caches if ctx.kind == "decoder" else 0
    return weights + [cache] * caches if cache else weights


def persistent_tensors(ctx: PlanContext, layout: Layout) -> list[int]:
    """Bytes of each tensor the rank holds for the whole step, in allocation order."""
    return _training(ctx, layout) if ctx.train else _serving(ctx, layout)


def allocator_overhead(ctx: PlanContext, layout: Layout) -> dict[str, int]:
    """What the allocator adds to the persistent tensors: ``allocator_rounding`` (their blocks
    over their bytes: size classes, 256-byte minimum) and ``allocator_segments`` (the segments
    over the blocks: the unused tails of segments the blocks opened)."""
    sizes = persistent_tensors(ctx, layout)
    allocated, reserved = layout_bytes(sizes)
    return {"allocator_rounding": allocated - sum(sizes), "allocator_segments": reserved - allocated}
