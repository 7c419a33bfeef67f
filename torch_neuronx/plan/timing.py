"""Projected time and cost of one layout: a training step, or a replica's serving figures (a
decoder's TTFT and time per output token, an encoder's latency), each with the error band of its
kind; the first-run compile; what the instances cost, including the cores the layout leaves idle.
The arithmetic is ``projection.job`` / ``projection.serving``; this module chooses and labels."""
from __future__ import annotations

import dataclasses

from ..projection import GraphProgram, job, serving
from ..projection.results import CompileProjection
from .context import PlanContext
from .request import EXECUTIONS, Layout
from .work import serving_work, training_work

APPLIES_TO = "compile mode (the published results ran compiled graphs)"
KERNELS_LABEL = "emulated (distinct kernel signatures traced)"


def band_dict(band: job.ErrorBand, prefix: str = "") -> dict:
    return {f"{prefix}error_band": band.text(), f"{prefix}error_band_fraction": band.fraction,
            f"{prefix}error_band_applies_to": APPLIES_TO}


@dataclasses.dataclass(frozen=True)
class Compilation:
    projection: CompileProjection
    distinct_kernels: int

    def to_dict(self) -> dict:
        return {**self.projection.to_dict(), "distinct_kernels": self.distinct_kernels,
                "distinct_kernels_label": KERNELS_LABEL}


def _compile(ctx: PlanContext, layout: Layout, graphs, kernels: int) -> Compilation:
    proj = ctx.projector(layout.lnc)
    done = (proj.compile(0, [GraphProgram(g.kernels) for g in graphs]) if ctx.job.execution == "compile"
            else proj.compile(kernels, []))
    return Compilation(done, kernels)


def cores(ctx: PlanContext, layout: Layout) -> job.CoreUse:
    return job.core_use(ctx.projector(layout.lnc), layout.world, layout.instances, ctx.job.price_per_hour)


@dataclasses.dataclass(frozen=True)
class TrainingTimePlan:
    """One global batch: the chosen mode's figures, both modes, the work, cost and band."""

    mode: str
    by_mode: dict[str, job.TrainingTime]
    work: job.TrainingWork
    cost: job.JobCost
    band: job.ErrorBand
    compilation: Compilation

    @property
    def chosen(self) -> job.TrainingTime:
        return self.by_mode[self.mode]

    def to_dict(self) -> dict:
        w = self.work
        return {"label": "projected", **dataclasses.asdict(self.chosen), **band_dict(self.band),
                "tokens_per_step": w.tokens_per_step, "micro_batches": w.micro_batches,
                "flops_per_step": w.model_flops_per_step, "usd_per_step": self.cost.usd,
                "usd_per_billion_tokens": self.cost.usd_per_billion_tokens, "price": self.cost.price,
                "by_mode": {m: dataclasses.asdict(t) for m, t in self.by_mode.items()},
                "graphs": {g.name: dataclasses.asdict(g) for g in (w.forward, w.backward, w.optimizer)},
                "collectives": {"per_micro_batch": dataclasses.asdict(w.micro_comm),
                                "per_global_batch": dataclasses.asdict(w.step_comm)},
                "compile": self.compilation.to_dict()}


@dataclasses.dataclass(frozen=True)
class ServingTimePlan:
    """One replica's batch, and the whole layout's throughput over its replicas."""

    mode: str
    by_mode: dict[str, serving.InferenceTime | serving.EncoderTime]
    work: serving.InferenceWork | serving.EncoderWork
    replicas: int
    tp: int
    cost: job.JobCost  # the instances over one batch of every replica
    bands: dict[str, job.ErrorBand]  # figure → its band
    compilation: Compilation

    @property
    def chosen(self):
        return self.by_mode[self.mode]

    @property
    def encoder(self) -> bool:
        return isinstance(self.work, serving.EncoderWork)

    def throughput(self) -> dict:
        """Per replica, per core and for the layout's replicas together."""
        t = self.chosen
        if self.encoder:
            return {"sequences_per_second_per_replica": t.sequences_per_second,
                    "sequences_per_second_per_core": t.sequences_per_second / self.tp,
                    "sequences_per_second": t.sequences_per_second * self.replicas}
        return {"tokens_per_second_per_replica": t.tokens_per_second,
                "tokens_per_second": t.tokens_per_second * self.replicas}

    def to_dict(self) -> dict:
        bands = {}
        for figure, band in self.bands.items():
            bands |= band_dict(band, "" if figure in ("tpot_seconds", "latency_seconds") else "ttft_")
        graphs = (self.work.forward,) if self.encoder else (self.work.prefill, self.work.decode)
        return {"label": "projected", **dataclasses.asdict(self.chosen), **self.throughput(), **bands,
                "replicas": self.replicas, "usd_per_batch": self.cost.usd,
                "usd_per_billion_tokens": self.cost.usd_per_billion_tokens,
                "usd_per_million_output_tokens": None if self.encoder else self.cost.usd_per_million_tokens,
                "usd_per_million_sequences": self.cost.usd_per_million_tokens if self.encoder else None,
                "price": self.cost.price, "by_mode": {m: dataclasses.asdict(t) for m, t in self.by_mode.items()},
                "graphs": {g.name: dataclasses.asdict(g) for g in graphs}, "compile": self.compilation.to_dict()}


def training_time(ctx: PlanContext, layout: Layout) -> TrainingTimePlan:
    proj = ctx.projector(layout.lnc)
    work, eager = training_work(ctx, layout)
    traced = ctx.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc)
    kernels = len(+(traced.graph_calls("forward") + traced.graph_calls("backward")))
    modes = {m: job.training_time(work, ctx.factors, m, eager) for m in EXECUTIONS}
    cost = job.job_cost(proj, modes[ctx.job.execution].step_seconds, work.tokens_per_step, layout.instances,
                        ctx.job.price_per_hour)
    return TrainingTimePlan(ctx.job.execution, modes, work, cost, job.error_band("step_seconds"),
                            _compile(ctx, layout, (work.forward, work.backward, work.optimizer), kernels))


def serving_time(ctx: PlanContext, layout: Layout) -> ServingTimePlan:
    proj = ctx.projector(layout.lnc)
    work, eager = serving_work(ctx, layout)
    first = "forward" if isinstance(work, serving.EncoderWork) else "prefill"
    kernels = len(+ctx.traced(layout.tp, layout.batch, False, layout.lnc).graph_calls(first))
    modes = {m: serving.serving_time(work, ctx.factors, m, eager) for m in EXECUTIONS}
    chosen = modes[ctx.job.execution]
    if isinstance(work, serving.EncoderWork):
        seconds, produced, graphs = chosen.latency_seconds, work.batch * layout.dp, (work.forward,)
        bands = {"latency_seconds": job.error_band("latency_seconds")}
    else:
        seconds, produced = chosen.request_seconds, work.batch * work.output_len * layout.dp
        graphs = (work.prefill, work.decode)
        bands = {"ttft_seconds": job.error_band("ttft_seconds"), "tpot_seconds": job.error_band("tpot_seconds")}
    cost = job.job_cost(proj, seconds, produced, layout.instances, ctx.job.price_per_hour)
    return ServingTimePlan(ctx.job.execution, modes, work, layout.dp, layout.tp, cost, bands,
                           _compile(ctx, layout, graphs, kernels))
