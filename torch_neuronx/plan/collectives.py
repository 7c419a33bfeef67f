"""The collectives of one rank: TP all-reduces of the hidden states, pipeline sends, the
data-parallel reduction and FSDP's gathers, and the serving graphs' all-reduces, as records
(kind, bytes, ranks, link) for the projection's ring/tree model."""
from __future__ import annotations

from collections import Counter

from ..projection import CollectiveRecord
from .context import PlanContext
from .request import Layout
from .trace import head_dim


def _efa_sharing(ctx: PlanContext, layout: Layout, group_of) -> int:
    """How many groups of one instance's ranks cross the instance at once (they share its EFA)."""
    per = min(ctx.cores_per_instance(layout.lnc), layout.world)
    return len({group_of(r) for r in range(per)})


def tp_all_reduces(ctx: PlanContext, layout: Layout, tokens: int, passes: int) -> Counter:
    """Two all-reduces of ``tokens`` hidden states per layer of the stage per pass (after
    attention and after the MLP; Megatron's layout), over the TP group."""
    if layout.tp == 1:
        return Counter()
    cfg = ctx.config
    nbytes = tokens * cfg.hidden_size * ctx.job.compute_dtype.itemsize
    layers = cfg.num_hidden_layers // layout.pp
    return Counter({CollectiveRecord("all_reduce", nbytes, layout.tp, ctx.link(range(layout.tp), layout)):
                    2 * layers * passes})


def tp_collectives(ctx: PlanContext, layout: Layout) -> Counter:
    """Training's TP all-reduces of one micro-batch on one stage: forward, backward, and the
    recompute when checkpointing."""
    return tp_all_reduces(ctx, layout, layout.batch * ctx.job.seq_len, 3 if layout.checkpointing else 2)


def pipeline_sends(ctx: PlanContext, layout: Layout) -> tuple[Counter, dict]:
    """Per micro-batch: the activations sent to the next stage and their gradients sent back,
    each TP rank its 1/TP slice, all ranks of an instance at once over the link between stages."""
    if layout.pp == 1:
        return Counter(), {}
    nbytes = (layout.batch * ctx.job.seq_len * ctx.config.hidden_size * ctx.job.compute_dtype.itemsize
              // layout.tp)
    link = ctx.link((0, layout.rank(0, 0, 1)), layout)
    rec = CollectiveRecord("send", nbytes, 2, link)
    sharing = ctx.cores_per_instance(layout.lnc) if link == "efa" else 1
    return Counter({rec: 2}), {rec: min(sharing, layout.world // layout.pp)}


def dp_collectives(ctx: PlanContext, layout: Layout) -> tuple[Counter, Counter, dict]:
    """(per micro-batch, per global batch, EFA sharing): FSDP gathers the stage's parameters in
    forward and backward of every micro-batch; the gradients are reduced once per global
    batch (all-reduce; reduce-scatter under ZeRO-1 and FSDP, then ZeRO-1 all-gathers the
    updated parameters). Replicated KV heads all-reduce their gradients over their replicas."""
    micro, step = Counter(), Counter()
    item = ctx.job.dtype.itemsize
    stage_bytes = ctx.stage_parameters(layout) * item
    sharing = {}
    if layout.dp > 1 and ctx.train:
        link = ctx.link([layout.rank(0, d, 0) for d in range(layout.dp)], layout)
        share = _efa_sharing(ctx, layout, lambda r: (r % layout.tp, r // (layout.tp * layout.dp))) \
            if link == "efa" else 1
        kinds = {"none": ["all_reduce"], "zero1": ["reduce_scatter", "all_gather"],
                 "fsdp": ["reduce_scatter"]}[layout.shard]
        for kind in kinds:
            step[CollectiveRecord(kind, stage_bytes, layout.dp, link)] += 1
        if layout.shard == "fsdp":
            micro[CollectiveRecord("all_gather", stage_bytes, layout.dp, link)] += 2
        sharing = {rec: share for rec in micro | step}
    heads = ctx.heads(layout.tp)
    if ctx.train and heads is not None and heads.kv_replicas > 1:
        kv_bytes = (2 * head_dim(ctx.config) * ctx.config.hidden_size * item
                    * (ctx.config.num_hidden_layers // layout.pp))
        replicas = heads.kv_replicas
        step[CollectiveRecord("all_reduce", kv_bytes, replicas, ctx.link(range(replicas), layout))] += 1
    return micro, step, sharing
