"""A plan: per-rank HBM, first-run compilations, time and cost of one layout, the smallest change
that fits when it does not, and a sweep over layouts.

``Planner`` ties the parts together; each part owns one job and returns a typed result:
``checks`` (what is accepted), ``memory`` (``MemoryPlan``), ``collectives`` and ``work`` (one
rank's work for ``projection.job``), ``timing`` (``TrainingTimePlan`` / ``ServingTimePlan``),
``search`` (``Suggestion``, ``SweepRow``). ``Plan.to_dict()`` is ``plan.json`` (docs/plan.md).
Every figure is labelled: ``projected`` (device model), ``emulated`` (counted by tracing) or
``assumed``.
"""
from __future__ import annotations

import dataclasses

from ..projection import job as projection_job
from ..runtime.errors import UsageError
from ..runtime.profiles import GiB, get_profile
from .checks import check_job, check_layout, check_request
from .context import PlanContext
from .heads import HeadLayout
from .memory import MemoryPlan, memory
from .request import Job, Layout
from .search import Suggestion, SweepRow, fits, suggest, sweep
from .sharding import ParameterCounts
from .timing import ServingTimePlan, TrainingTimePlan, cores, serving_time, training_time


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a plan says about one layout (``plan.json`` is ``to_dict()``)."""

    job: Job
    kind: str
    model_type: str
    max_len: int | None
    output_len: int
    layout: Layout
    parameters: ParameterCounts
    heads: HeadLayout | None
    method: str
    memory: MemoryPlan
    time: TrainingTimePlan | ServingTimePlan
    cores: projection_job.CoreUse
    suggestion: Suggestion | None = None
    sweep: tuple[SweepRow, ...] | None = None

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def _serving(self, t: dict) -> dict:
        keys = ("label", "mode", "latency_seconds", "sequences_per_second", "sequences_per_second_per_core",
                "sequences_per_second_per_replica", "ttft_seconds", "tpot_seconds", "tokens_per_second",
                "tokens_per_second_per_replica", "usd_per_million_output_tokens", "usd_per_million_sequences",
                "error_band", "ttft_error_band")
        return {k: t[k] for k in keys if k in t} | {
            "kind": self.kind, "batch_size": self.layout.batch, "replicas": self.layout.dp,
            "input_len": self.job.seq_len, "output_len": self.output_len, "max_len": self.max_len,
            "weight_dtype": self.job.weight_dtype or self.job.precision}

    def to_dict(self) -> dict:
        t = self.time.to_dict()
        if not self.fits:  # figures of a layout that cannot run: shown as what it would do if it fit
            t["label"] = "projected, if it fit (it does not)"
        out = {"model": self.job.model, "model_type": self.model_type, "kind": self.kind,
               "instance": self.job.instance, "mode": self.job.mode, "dtype": self.job.precision,
               "precision": self.job.precision, "seq_len": self.job.seq_len, "fits": self.fits,
               "layout": self.layout.to_dict(), "parameters": self.parameters.to_dict(),
               "heads": None if self.heads is None else {**dataclasses.asdict(self.heads),
                                                         "per_rank": self.heads.heads_per_rank,
                                                         "kv_per_rank": self.heads.kv_heads_per_rank,
                                                         "text": self.heads.describe()},
               "method": self.method, "memory": self.memory.to_dict(), "time": t, "cores": self.cores.to_dict()}
        if self.job.mode == "infer":
            out["inference"] = self._serving(t)
        if not self.fits:
            out["suggestion"] = None if self.suggestion is None else self.suggestion.to_dict()
        if self.sweep is not None:
            out["sweep"] = [r.to_dict() for r in self.sweep]
        return out


class Planner:
    """Plans for one job (model, instance type, sequence, mode, dtypes); caches traces."""

    def __init__(self, model: str, instance: str | None = None, seq_len: int = 2048, mode: str = "train",
                 dtype: str = "bf16", decode_tokens: int | None = None, price_per_hour: float | None = None,
                 execution: str = "compile", factors: projection_job.Factors | None = None,
                 max_len: int | None = None, weight_dtype: str | None = None, vocab_parallel: bool = False,
                 attention: str | None = None) -> None:
        request = Job(model, get_profile(instance).name, seq_len, mode, dtype, decode_tokens, max_len, weight_dtype,
                      price_per_hour, execution, vocab_parallel, attention)
        check_request(request)
        self.ctx = PlanContext(request, factors)
        check_job(self.ctx)

    @property
    def profile(self):
        return self.ctx.profile

    @property
    def config(self):
        return self.ctx.config

    def check(self, layout: Layout) -> None:
        check_layout(self.ctx, layout)

    def memory(self, layout: Layout) -> MemoryPlan:
        return memory(self.ctx, layout)

    def time(self, layout: Layout) -> TrainingTimePlan | ServingTimePlan:
        return training_time(self.ctx, layout) if self.ctx.train else serving_time(self.ctx, layout)

    def plan(self, layout: Layout, suggest_change: bool = True) -> Plan:
        ctx = self.ctx
        check_layout(ctx, layout)
        mem = memory(ctx, layout)
        if not mem.fits and mem.padding_bytes and mem.total_bytes - mem.padding_bytes <= mem.hbm_bytes:
            raise UsageError(self._padding_refusal(layout, mem))
        traced = ctx.traced(layout.tp, layout.batch, layout.checkpointing and ctx.train, layout.lnc)
        max_len = ctx.max_len if not ctx.train and ctx.kind == "decoder" else None
        return Plan(ctx.job, ctx.kind, ctx.config.model_type, max_len, ctx.output_len, layout, ctx.parameters(layout.tp, layout.dp), ctx.heads(layout.tp), traced.method,
                    mem, self.time(layout), cores(ctx, layout),
                    suggest(ctx, layout) if suggest_change and not mem.fits else None)

    def _padding_refusal(self, layout: Layout, mem: MemoryPlan) -> str:
        """Padding alone pushes the layout past the core's HBM: say so, with the nearest TP that fits."""
        heads = self.ctx.heads(layout.tp)
        near = sorted((t for t in range(1, self.ctx.cores_per_instance(layout.lnc) * layout.instances + 1)
                       if heads.heads % t == 0 and t * layout.dp <= self.ctx.cores_per_instance(layout.lnc)
                       * layout.instances), key=lambda t: (abs(t - layout.tp), -t))
        fitting = next((t for t in near if fits(self.ctx, dataclasses.replace(layout, tp=t))), None)
        return (f"--tp {layout.tp}: {heads.describe()}; the padding adds {mem.padding_bytes / GiB:.2f} GiB per core "
                f"and the layout does not fit ({mem.total_bytes / GiB:.2f} / {mem.hbm_bytes / GiB:.2f} GiB); "
                + (f"the nearest TP that fits is --tp {fitting}" if fitting else "no TP that divides the heads fits"))

    def suggest(self, layout: Layout) -> Suggestion | None:
        return suggest(self.ctx, layout)

    def sweep(self, layout: Layout) -> list[SweepRow]:
        return sweep(self.ctx, layout)
