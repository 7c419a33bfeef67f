"""A whole job on many ranks: compiled graphs per micro-step, the 1F1B pipeline, gradient
accumulation to a global batch, and the data-parallel reduction (serving: ``serving.py``).

The work of one rank is held as factor-free quantities (``GraphWork``: FLOPs as TensorE
seconds at peak, bytes, kernels; ``CommWork``: link seconds at full bandwidth and
latency steps), so the few fitted physical factors (``Factors``, from
``fitted_factors.json``) turn them into seconds without tracing again: the fit
(``fit.py``) and the planner use the same arithmetic. Every figure is projected.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from pathlib import Path

from ..runtime.errors import DataFileError, UsageError
from .calibration import Calibration
from .collectives import CollectiveRecord, collective_seconds
from .hardware import LINKS, DeviceModel
from .kernel import KernelCost

FACTORS_FILE = Path(__file__).with_name("fitted_factors.json")
COMPUTE_ENGINES = ("vector", "scalar", "gpsimd")


@dataclasses.dataclass(frozen=True)
class Factors:
    """The physical factors fitted on AWS's published results (meanings in ``fitted_factors.json``)."""

    tensor_efficiency: float  # achieved / peak TensorE rate inside a compiled graph
    hbm_efficiency: float  # achieved / peak HBM bandwidth
    link_efficiency: float  # achieved / peak bandwidth of collectives inside an instance (on chip, NeuronLink)
    launch_seconds: float  # fixed cost of one graph launch
    collective_step_seconds: float  # latency of one step of a ring or tree collective
    efa_efficiency: float  # achieved / peak EFA bandwidth of collectives between instances
    engine_efficiency: float  # achieved / documented VectorE, ScalarE and GpSimd element rate in a graph
    engine_overlap: float  # share of the shorter of TensorE's and the other engines' time hidden under the longer
    op_seconds: float  # fixed cost of each op of a graph (dependent instructions waiting on each other)

    @classmethod
    def of(cls, cal: Calibration) -> "Factors":
        """The factors a calibration holds, as the graph and job arithmetic reads them (a per-link
        latency table counts as its slowest link)."""
        return cls(tensor_efficiency=cal.efficiency["tensor"], hbm_efficiency=cal.efficiency["hbm"],
                   link_efficiency=cal.efficiency["link"], launch_seconds=cal.launch_seconds["graph"],
                   collective_step_seconds=max(cal.link_latency_seconds.values()),
                   efa_efficiency=cal.efficiency.get("efa", cal.efficiency["link"]),
                   engine_efficiency=cal.efficiency["vector"],
                   engine_overlap=cal.graph_engine_overlap_share if cal.graph_engine_overlap else 0.0,
                   op_seconds=cal.graph_op_seconds)

    def calibration(self, base: Calibration) -> Calibration:
        """``base`` with these factors in force (what the eager per-op projection runs on)."""
        engines = dict.fromkeys(("vector", "scalar", "gpsimd"), self.engine_efficiency)
        return dataclasses.replace(
            base, efficiency={**base.efficiency, "tensor": self.tensor_efficiency, "hbm": self.hbm_efficiency,
                              "link": self.link_efficiency, "efa": self.efa_efficiency, **engines},
            launch_seconds={**base.launch_seconds, "graph": self.launch_seconds},
            link_latency_seconds=dict.fromkeys(LINKS, self.collective_step_seconds),
            graph_engine_overlap_share=self.engine_overlap, graph_op_seconds=self.op_seconds,
            source=f"factors fitted on published Trainium results ({FACTORS_FILE.name})")


@functools.lru_cache(maxsize=1)
def _factors_data() -> dict:
    try:
        return json.loads(FACTORS_FILE.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataFileError(f"cannot read the fitted factors {FACTORS_FILE}: {exc}") from None


def fitted_factors() -> Factors:
    """The factors in force: the last fit written to ``fitted_factors.json``."""
    data = _factors_data()["factors"]
    return Factors(**{f.name: float(data[f.name]["value"]) for f in dataclasses.fields(Factors)})


@dataclasses.dataclass(frozen=True)
class ErrorBand:
    """How far the projection was from AWS's published figures of one kind, predicting each
    row with factors fitted on the other rows (leave-one-out)."""

    figure: str  # a key of FIGURES
    fraction: float  # the largest leave-one-out relative error among those figures
    rows: int  # published rows holding such a figure
    total_rows: int  # rows in the calibration set

    def text(self) -> str:
        return (f"±{self.fraction:.0%}, leave-one-out over {self.rows} published Trainium "
                f"{FIGURES.get(self.figure, self.figure)} figure{'s' if self.rows > 1 else ''} "
                f"(of {self.total_rows} rows fitted)")


# the kinds of published figure, each with its own band
FIGURES = {"step_seconds": "training step", "ttft_seconds": "time-to-first-token",
           "tpot_seconds": "time-per-output-token", "latency_seconds": "encoder latency"}


def error_band(figure: str = "step_seconds") -> ErrorBand:
    """The band every projected figure derived from ``figure`` carries (the plan and the pilot):
    ``step_seconds`` for training times, throughput and cost; ``ttft_seconds`` and
    ``tpot_seconds`` for a decoder's serving; ``latency_seconds`` for an encoder's."""
    loo = _factors_data()["leave_one_out"]
    if figure not in loo["by_figure"]:
        raise ValueError(f"no leave-one-out error for {figure!r}; known: {sorted(loo['by_figure'])}")
    entry = loo["by_figure"][figure]
    return ErrorBand(figure, entry["max_abs_error"], entry["rows"], loo["rows"])


def clear_cache() -> None:
    """Forget the cached factors file (after ``--validate`` rewrote it)."""
    _factors_data.cache_clear()


# --- the work of one rank, free of the fitted factors ---------------------------------------
@dataclasses.dataclass(frozen=True)
class GraphWork:
    """One compiled graph as one device program: a plan's (forward, backward, optimizer, prefill or
    decode of one rank) and a ``torch.compile`` graph's (``graph.project_graph``). Its seconds are
    computed here only."""

    name: str
    flops: float
    tensor_seconds_at_peak: float  # TensorE time at 100 % efficiency, at each operand dtype's rate
    engine_seconds_at_peak: float  # VectorE / ScalarE / GpSimd at their documented rates: the busiest, or the sum
    io_bytes: float  # inputs, weights and outputs: HBM traffic even when every intermediate stays on chip
    intermediate_bytes: float  # what its eager kernels move beyond io_bytes in tensors too large for SBUF
    hbm_bytes_per_s: float
    kernels: int  # its ops the eager device launches, one each (no casts, no contiguity copies)
    engines_overlap: bool = True  # the compiler runs engines concurrently (calibration ``graph_engine_overlap``)
    streamed_seconds: float = 0.0  # work on the weights as they stream in (dequantization): overlaps their read

    def compute_seconds(self, f: Factors) -> float:
        """TensorE and the other engines: the longer, plus the part of the shorter not hidden under it."""
        tensor = self.tensor_seconds_at_peak / f.tensor_efficiency
        engines = self.engine_seconds_at_peak / f.engine_efficiency
        hidden = f.engine_overlap if self.engines_overlap else 0.0
        return max(tensor, engines) + (1 - hidden) * min(tensor, engines)

    def memory_seconds(self, f: Factors) -> float:
        """Its own I/O plus the intermediates too large for SBUF, at the achieved HBM bandwidth (or the
        work streamed with the weights, if longer)."""
        return max((self.io_bytes + self.intermediate_bytes) / (self.hbm_bytes_per_s * f.hbm_efficiency),
                   self.streamed_seconds)

    def seconds(self, f: Factors) -> float:
        """One launch: the compute or the HBM traffic, whichever is longer, plus the launch and each
        op's fixed cost."""
        return max(self.compute_seconds(f), self.memory_seconds(f)) + f.launch_seconds + self.kernels * f.op_seconds

    def scaled(self, n: float) -> "GraphWork":
        """The graph of ``n`` times the work (a pipeline stage holding a share of the layers)."""
        return dataclasses.replace(self, flops=self.flops * n, tensor_seconds_at_peak=self.tensor_seconds_at_peak * n,
                                   engine_seconds_at_peak=self.engine_seconds_at_peak * n, io_bytes=self.io_bytes * n,
                                   intermediate_bytes=self.intermediate_bytes * n, kernels=round(self.kernels * n),
                                   streamed_seconds=self.streamed_seconds * n)


def _hidden_states_op(cost: KernelCost, hidden: int) -> bool:
    """Whether a kernel's first tensor is hidden states (last dimension ``hidden``, two or more dims)."""
    return len(cost.first_shape) >= 2 and cost.first_shape[-1] == hidden


@dataclasses.dataclass(frozen=True)
class SequenceParallel:
    """Sequence parallelism over a TP group of ``tp``: the elementwise work on the hidden states
    (norms, residual adds, dropout), replicated on every TP rank without it, is split ``tp`` ways."""

    tp: int
    hidden: int


def graph_work(name: str, kernels: Mapping[str, KernelCost], calls: Mapping[str, int], io_bytes: float,
               device: DeviceModel, cal: Calibration, sequence_parallel: SequenceParallel | None = None,
               converts: Mapping[str, int] | None = None) -> GraphWork:
    """The traced kernels ``calls`` (signature → count, costs projected under ``cal``) as one graph,
    with ``converts``: the dtype casts the eager device runs without a kernel, each a
    ``stablehlo.convert`` in the graph (``kernel.in_graph``), whose bytes count like any op's but
    which add no launch. A copy that keeps its dtype (the eager device's contiguity kernels among
    them) is nothing in a graph: the compiler folds layouts into the ops that read them.

    The compiler keeps a graph's intermediates on chip when they fit: the traffic beyond its own
    I/O that reaches HBM is the share of its kernels' bytes moved by kernels whose largest tensor
    is larger than the logical core's SBUF (``DeviceModel.sbuf_bytes``)."""
    tensor = flops = eager_bytes = spilled = 0.0
    engines = dict.fromkeys(COMPUTE_ENGINES, 0.0)
    launches = 0
    for counts, launched in ((calls, True), (converts or {}, False)):
        for key, n in counts.items():
            cost = kernels[key]
            if cost.engine == "none" or cost.graph_identity:
                continue
            launches += n if launched else 0
            flops += cost.flops * n
            share = 1.0
            if sequence_parallel and cost.engine != "tensor" and _hidden_states_op(cost, sequence_parallel.hidden):
                share = 1 / sequence_parallel.tp
            eager_bytes += cost.bytes * n * share
            if cost.largest_bytes * share > device.sbuf_bytes:
                spilled += cost.bytes * n * share
            if cost.engine == "tensor":
                tensor += cost.compute_seconds * cal.efficiency["tensor"] * n
                engines["scalar"] += cost.scalar_seconds * cal.efficiency["scalar"] * n
            elif cost.engine in engines:
                engines[cost.engine] += cost.compute_seconds * cal.efficiency[cost.engine] * n * share
    combined = max(engines.values()) if cal.graph_engine_overlap else sum(engines.values())
    intermediate = max(0.0, eager_bytes - io_bytes) * (spilled / eager_bytes if eager_bytes else 0.0)
    return GraphWork(name, flops, tensor, combined, io_bytes, intermediate, device.hbm_bytes_per_s, launches,
                     cal.graph_engine_overlap)


@dataclasses.dataclass(frozen=True)
class CommWork:
    """Collectives on the critical path: link seconds at full bandwidth (inside an instance, and
    over EFA between instances) plus latency steps."""

    seconds_at_peak: float
    steps: float
    bytes: float
    efa_seconds_at_peak: float = 0.0

    def seconds(self, f: Factors) -> float:
        return (self.seconds_at_peak / f.link_efficiency + self.efa_seconds_at_peak / f.efa_efficiency
                + self.steps * f.collective_step_seconds)

    def __add__(self, other: "CommWork") -> "CommWork":
        return CommWork(self.seconds_at_peak + other.seconds_at_peak, self.steps + other.steps,
                        self.bytes + other.bytes, self.efa_seconds_at_peak + other.efa_seconds_at_peak)


NO_COMM = CommWork(0.0, 0.0, 0.0)


def comm_work(records: Mapping[CollectiveRecord, int], device: DeviceModel, cal: Calibration,
              sharing: Mapping[CollectiveRecord, int] | None = None) -> CommWork:
    """Collectives (record → count) as factor-free work, through the projection's ring/tree model.
    ``sharing[record]`` rings run at once over the same link (data-parallel rings leaving an
    instance share its EFA): each gets that share of the bandwidth."""
    bandwidth_only = dataclasses.replace(cal, efficiency={**cal.efficiency, "link": 1.0, "efa": 1.0},
                                         link_latency_seconds=dict.fromkeys(LINKS, 0.0))
    one_second_steps = dataclasses.replace(bandwidth_only, link_latency_seconds=dict.fromkeys(LINKS, 1.0))
    total = NO_COMM
    for rec, n in records.items():
        shared = dataclasses.replace(rec, nbytes=rec.nbytes * (sharing or {}).get(rec, 1))
        at_peak = collective_seconds(shared, device, bandwidth_only)
        steps = collective_seconds(shared, device, one_second_steps) - at_peak
        efa = rec.link == "efa"
        total = total + CommWork(0.0 if efa else at_peak * n, round(steps) * n, rec.nbytes * n,
                                 at_peak * n if efa else 0.0)
    return total


# --- cost -------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class JobCost:
    """What ``seconds`` of the job cost on its instances, and per token produced."""

    usd: float | None  # None without a price
    usd_per_billion_tokens: float | None
    price: dict

    @property
    def usd_per_million_tokens(self) -> float | None:
        return None if self.usd_per_billion_tokens is None else self.usd_per_billion_tokens / 1e3


def job_cost(projector, seconds: float, tokens: int, instances: int,
             price_per_hour: float | None = None) -> JobCost:
    """The projector's whole-instance cost of ``seconds`` on ``instances``, spread over ``tokens``."""
    cost = projector.cost(seconds, 1, price_per_hour, instances=instances)
    per = cost.run_usd / tokens * 1e9 if cost.run_usd is not None and tokens else None
    return JobCost(cost.run_usd, per, cost.price.to_dict())


@dataclasses.dataclass(frozen=True)
class CoreUse:
    """The logical cores a layout uses of the instances it rents, and what the idle ones cost
    (the instances are priced whole)."""

    used: int
    total: int
    usd_per_hour: float | None  # all the instances; None without a price

    @property
    def idle(self) -> int:
        return self.total - self.used

    @property
    def idle_usd_per_hour(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour * self.idle / self.total

    def to_dict(self) -> dict:
        return {"used": self.used, "total": self.total, "idle": self.idle,
                "usd_per_hour": self.usd_per_hour, "idle_usd_per_hour": self.idle_usd_per_hour}


def core_use(projector, used: int, instances: int, price_per_hour: float | None = None) -> CoreUse:
    """``used`` of the logical cores of ``instances`` of the projector's instance type."""
    hourly = projector.price(price_per_hour).usd_per_hour
    return CoreUse(used, projector.device.logical_cores * instances, None if hourly is None else hourly * instances)


# --- training: accumulation, the 1F1B pipeline, one reduction per global batch -----------------
def accumulation_steps(global_batch: int, micro_batch: int, dp: int) -> int:
    """Micro-batches each data-parallel rank runs per optimizer step: G / (M·D)."""
    if min(global_batch, micro_batch, dp) < 1 or global_batch % (micro_batch * dp):
        raise UsageError(f"--global-batch {global_batch} is not divisible by --micro-batch {micro_batch} × "
                         f"--dp {dp} = {micro_batch * dp}")
    return global_batch // (micro_batch * dp)


def pipeline_bubble(pp: int, micro_batches: int) -> float:
    """The idle share of a 1F1B pipeline of ``pp`` stages over ``micro_batches``: (P−1)/(m+P−1)."""
    return (pp - 1) / (micro_batches + pp - 1)


@dataclasses.dataclass(frozen=True)
class TrainingWork:
    """One rank's (one pipeline stage's) work per global batch."""

    forward: GraphWork  # one micro-batch
    backward: GraphWork
    optimizer: GraphWork  # once per global batch
    micro_comm: CommWork  # TP collectives and pipeline sends of one micro-batch
    step_comm: CommWork  # the data-parallel gradient reduction (and ZeRO-1 / FSDP gathers), once
    micro_batches: int
    pp: int
    tokens_per_step: int  # whole job
    model_flops_per_step: float  # whole job, for MFU
    peak_flops_per_rank: float
    ranks: int


@dataclasses.dataclass(frozen=True)
class TrainingTime:
    """Projected seconds of one global batch and what they are made of."""

    mode: str
    step_seconds: float
    micro_step_seconds: float  # forward + backward + collectives of one micro-batch on one stage
    forward_seconds: float
    backward_seconds: float
    micro_collective_seconds: float
    step_collective_seconds: float
    optimizer_seconds: float
    pipeline_slots: int  # m + P − 1 micro-step slots per global batch
    bubble_fraction: float
    launches_per_step: int
    tokens_per_second: float
    mfu: float


def training_time(work: TrainingWork, f: Factors, mode: str = "compile",
                  eager_seconds: Mapping[str, float] | None = None) -> TrainingTime:
    """Seconds of one global batch: (m + P − 1) micro-step slots, then the gradient reduction
    and one optimizer step. In eager mode the graphs' seconds are the per-op projection's
    (``eager_seconds`` by graph name, launch overhead per op included)."""
    if mode == "compile":
        fwd, bwd, opt = (g.seconds(f) for g in (work.forward, work.backward, work.optimizer))
        launches = 2 * work.micro_batches + 1
    else:
        fwd, bwd, opt = (eager_seconds[g.name] for g in (work.forward, work.backward, work.optimizer))
        launches = (work.forward.kernels + work.backward.kernels) * work.micro_batches + work.optimizer.kernels
    micro_comm, step_comm = work.micro_comm.seconds(f), work.step_comm.seconds(f)
    slots = work.micro_batches + work.pp - 1
    micro = fwd + bwd + micro_comm
    step = slots * micro + step_comm + opt
    return TrainingTime(mode, step, micro, fwd, bwd, micro_comm, step_comm, opt, slots,
                        pipeline_bubble(work.pp, work.micro_batches), launches,
                        work.tokens_per_step / step,
                        work.model_flops_per_step / (step * work.ranks * work.peak_flops_per_rank))
