"""The typed results of a projection: what the pilot, the plan, the benchmarks and
``metrics()`` display, and never recompute.

Every field name says its unit (``seconds``, ``usd``, ``bytes``, ``flops``); every
result carries ``label = "projected"``. ``to_dict()`` is the JSON form written into
reports; it is the only place a result becomes a dict.
"""
from __future__ import annotations

import dataclasses

LABEL = "projected"
SECONDS_PER_HOUR = 3600.0


def _plain(value):
    if dataclasses.is_dataclass(value):
        return value.to_dict()
    return value


@dataclasses.dataclass(frozen=True)
class _Result:
    def to_dict(self) -> dict:
        return {"label": LABEL, **{f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}}


@dataclasses.dataclass(frozen=True)
class Price:
    """An hourly price, where it comes from, and the one hours→seconds conversion
    (a looked-up or given figure, not a projection: it carries no label)."""

    instance: str
    usd_per_hour: float | None  # None: no price known and none given
    source: str
    date: str | None = None
    region: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def usd(self, seconds: float) -> float | None:
        """What ``seconds`` of the whole instance cost (None without a price)."""
        return None if self.usd_per_hour is None else seconds * self.usd_per_hour / SECONDS_PER_HOUR

    def describe(self) -> str:
        """One line: the price and its provenance."""
        if self.usd_per_hour is None:
            return self.source
        where = ", ".join(x for x in (self.region, self.date) if x)
        return f"${self.usd_per_hour:.4g}/h for {self.instance}" + (f" ({where})" if where else "") \
            + f": {self.source}"


@dataclasses.dataclass(frozen=True)
class CompileProjection(_Result):
    """Projected neuronx-cc time of a set of programs compiled with an empty NEFF cache."""

    seconds: float
    programs: int  # neuronx-cc invocations (eager kernels + graphs)
    eager_kernels: int  # one-kernel programs of eager mode
    graphs: int  # compiled graphs
    stablehlo_ops: int  # ops of the programs whose StableHLO size is known
    kernel_ops: int  # ATen kernels standing in for ops where the program was not lowered
    seconds_per_program: float
    seconds_per_op: float
    basis: str  # one line: how the figure was obtained


@dataclasses.dataclass(frozen=True)
class StepProjection(_Result):
    """Projected device time of one step (or any window of work) on one logical core."""

    seconds: float  # compute + collectives, no overlap (the figure every report shows)
    seconds_full_overlap: float  # collectives hidden behind compute
    compute_seconds: float  # eager kernels + graphs, launch overhead included
    eager_seconds: float
    graph_seconds: float
    collective_seconds: float
    launch_overhead_seconds: float
    flops: int
    mfu: float | None  # against the logical core's BF16 TensorE peak


@dataclasses.dataclass(frozen=True)
class WindowProjection(_Result):
    """The projection of a window of work (between two marks): its step figures, the distinct
    kernel signatures it ran (what a first run compiles) and where its eager time went."""

    step: StepProjection
    eager_kernels: int  # distinct eager kernel signatures run in the window
    eager_by_op: dict  # op -> breakdown row of Projector.summary
    eager_by_engine: dict  # engine -> seconds


@dataclasses.dataclass(frozen=True)
class CostProjection(_Result):
    """What a run of ``steps`` steps costs on ``instances`` whole instances, plus its first-run compile."""

    steps: int
    instances: int
    step_seconds: float
    run_seconds: float
    compile_seconds: float
    run_usd: float | None
    compile_usd: float | None
    total_usd: float | None
    price: Price
