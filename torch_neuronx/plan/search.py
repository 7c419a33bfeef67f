"""The smallest change that makes a layout fit, and the sweep over the layouts that fit, ranked
by what the job is for: training by cost per token, serving by cost per 1M output tokens (an
encoder's per 1M sequences), then latency."""
from __future__ import annotations

import dataclasses
import math

from ..runtime.errors import UserError
from .checks import check_layout
from .context import PlanContext
from .memory import memory
from .request import Layout, diff
from .timing import ServingTimePlan, serving_time, training_time


@dataclasses.dataclass(frozen=True)
class Suggestion:
    change: str
    layout: Layout
    memory_total_bytes: float

    def to_dict(self) -> dict:
        return {"change": self.change, "layout": dataclasses.asdict(self.layout),
                "memory_total_bytes": self.memory_total_bytes}


def fits(ctx: PlanContext, layout: Layout) -> bool:
    try:
        check_layout(ctx, layout)
    except UserError:  # the layout is not valid here (a flag combination or the projection refuses it)
        return False
    return memory(ctx, layout).fits


def _suggestion(ctx: PlanContext, layout: Layout, candidate: Layout) -> Suggestion:
    return Suggestion(diff(layout, candidate), candidate, memory(ctx, candidate).total_bytes)


def suggest(ctx: PlanContext, layout: Layout) -> Suggestion | None:
    """The smallest change that fits: one knob first (checkpointing, more data parallelism or a
    larger TP when serving, a smaller micro-batch, LNC), then checkpointing with more data
    parallelism, then more instances."""
    rep = dataclasses.replace
    per = ctx.cores_per_instance(layout.lnc)
    free = per * layout.instances // (layout.tp * layout.pp)
    ckpt = [rep(layout, checkpointing=True)] if ctx.train and not layout.checkpointing else []
    wider = [rep(layout, dp=f, global_batch=None) for f in range(layout.dp + 1, free + 1)
             if (f & (f - 1)) == 0 or f == free] if ctx.train else \
        [rep(layout, tp=t) for t in (layout.tp * 2 ** k for k in range(1, 8)) if t * layout.dp <= per * layout.instances]
    smaller = [rep(layout, batch=b) for b in (layout.batch // 2 ** k for k in range(1, 8)) if b >= 1]
    lnc = [rep(layout, lnc=n) for n in ctx.profile.allowed_lnc if n > layout.lnc]
    both = [rep(c, checkpointing=True) for c in wider] if ckpt else []
    for candidate in ckpt + wider + smaller + lnc + both:
        if fits(ctx, candidate):
            return _suggestion(ctx, layout, candidate)
    for n in range(layout.instances + 1, 65):  # more instances: all their cores, checkpointing
        candidate = (rep(layout, instances=n, dp=per * n // (layout.tp * layout.pp), global_batch=None,
                         checkpointing=True) if ctx.train else
                     rep(layout, instances=n, tp=per * n // layout.dp))
        if fits(ctx, candidate):
            return _suggestion(ctx, layout, candidate)
    return None


@dataclasses.dataclass(frozen=True)
class SweepRow:
    layout: Layout
    memory_total_bytes: float
    figures: dict  # the ranking figures of the job's kind

    def to_dict(self) -> dict:
        return {"layout": dataclasses.asdict(self.layout), "memory_total_bytes": self.memory_total_bytes,
                **self.figures}


def _figures(ctx: PlanContext, candidate: Layout) -> dict:
    if ctx.train:
        t = training_time(ctx, candidate)
        return {"step_seconds": t.chosen.step_seconds, "tokens_per_second": t.chosen.tokens_per_second,
                "mfu": t.chosen.mfu, "usd_per_billion_tokens": t.cost.usd_per_billion_tokens,
                "rank_by": t.cost.usd_per_billion_tokens, "then_by": t.chosen.step_seconds}
    t: ServingTimePlan = serving_time(ctx, candidate)
    out = {k: v for k, v in t.to_dict().items() if k in (
        "latency_seconds", "ttft_seconds", "tpot_seconds", "tokens_per_second", "sequences_per_second",
        "usd_per_million_output_tokens", "usd_per_million_sequences")}
    money = out.get("usd_per_million_output_tokens", out.get("usd_per_million_sequences"))
    return out | {"rank_by": money, "then_by": out.get("latency_seconds", out.get("tpot_seconds"))}


def sweep(ctx: PlanContext, layout: Layout) -> list[SweepRow]:
    """Every TP (a power of two within one instance) × DP (data parallelism, or serving replicas,
    filling the instances; the layout's pipeline and sharding kept) × micro-batch (the given one
    and halves), with and without checkpointing when training, that fits, cheapest first."""
    per = ctx.cores_per_instance(layout.lnc)
    cores = per * layout.instances
    rows = []
    for tp in (t for t in (2 ** k for k in range(8)) if t * layout.pp <= per):
        for batch in sorted({max(1, layout.batch // 2 ** k) for k in range(3)}, reverse=True):
            for ckpt in ((False, True) if ctx.train else (False,)):
                candidate = dataclasses.replace(layout, tp=tp, dp=cores // (tp * layout.pp), batch=batch,
                                                checkpointing=ckpt, global_batch=None)
                if fits(ctx, candidate):
                    rows.append(SweepRow(candidate, memory(ctx, candidate).total_bytes, _figures(ctx, candidate)))
    rows.sort(key=lambda r: (math.inf if r.figures["rank_by"] is None else r.figures["rank_by"],
                             r.figures["then_by"]))
    return rows
