"""What every part of a plan reads: the job, the model's config and kind, the instance, and the
pieces computed once and cached (exact parameter counts, the traces, the projector).

The memory, collective, work, timing and search modules each take a ``PlanContext`` and a
``Layout`` and return a typed result; none keeps state of its own.

Traces and projectors are also shared between the plans of one process: a trace is a pure
function of the model's config, the rank's workload and the projector, and it is the seconds of
a plan (a model built and run on fake tensors), so planning the same model again (another
instance count, batch or output length, a notebook re-running a cell) reuses it.
"""
from __future__ import annotations

import functools

import torch

from ..numerics import fp8_linear
from ..projection import Calibration, Projector, defaults, link_for_ranks
from ..projection import job as projection_job
from ..runtime.profiles import get_profile
from .heads import HeadLayout, config_heads
from .model_config import load_config, model_kind
from .request import DEFAULT_OUTPUT_LEN, WEIGHT_DTYPES, Job, Layout
from .sharding import ParameterCounts, per_rank_parameters
from .trace import TraceResult, Workload, head_dim, trace


class PlanContext:
    """One job on one instance type; caches what layouts share."""

    def __init__(self, job: Job, factors: projection_job.Factors | None = None) -> None:
        self.job = job
        self.config = load_config(job.model)
        self.kind = model_kind(self.config)  # decoder | encoder | encoder-decoder
        self.profile = get_profile(job.instance)
        self.factors = factors or projection_job.fitted_factors()
        self._projectors: dict[int, Projector] = {}

    # --- the job's figures, with their defaults resolved ------------------------------------
    @property
    def train(self) -> bool:
        return self.job.mode == "train"

    @property
    def output_len(self) -> int:
        if self.train:
            return 0
        if self.job.output_len is not None:
            return self.job.output_len
        return DEFAULT_OUTPUT_LEN if self.kind == "decoder" else 0

    @property
    def prefill_len(self) -> int:
        """Positions the context encoding runs: the prompt, padded to its bucket when one is given
        (the serving stacks compile the context encoding for fixed lengths)."""
        return self.job.context_bucket or self.job.seq_len

    @property
    def max_len(self) -> int:
        """Positions of the static KV cache (prompt plus output unless given; at least the bucket)."""
        return self.job.max_len or max(self.job.seq_len + self.output_len, self.prefill_len + 1)

    @property
    def weight_dtype(self) -> torch.dtype:
        """How the projections' weights are stored (serving may store them narrower)."""
        return WEIGHT_DTYPES[self.job.weight_dtype] if self.job.weight_dtype else self.job.dtype

    # --- cached pieces ----------------------------------------------------------------------
    def cores_per_instance(self, lnc: int) -> int:
        return self.profile.logical_cores(lnc)

    def projector(self, lnc: int) -> Projector:
        if lnc not in self._projectors:
            self._projectors[lnc] = _shared_projector(self.profile.name, lnc, self.factors.calibration(defaults()))
        return self._projectors[lnc]

    @functools.lru_cache(maxsize=None)
    def parameters(self, tp: int, fsdp: int) -> ParameterCounts:
        return per_rank_parameters(self.config, tp, fsdp, self.job.vocab_parallel)

    def heads(self, tp: int) -> HeadLayout | None:
        return config_heads(self.config, tp)

    @functools.lru_cache(maxsize=None)
    def traced(self, tp: int, batch: int, checkpointing: bool, lnc: int) -> TraceResult:
        work = Workload(self.job.mode, tp, batch, self.job.seq_len if self.train else self.prefill_len, self.job.dtype, checkpointing and self.train,
                        autocast=self.job.dtype != self.job.compute_dtype,
                        max_len=self.max_len if self.kind == "decoder" else 0,
                        heads=self.heads(tp), rank_parameters=self.parameters(tp, 1).layer_unsharded,
                attention="sdpa" if self.job.fused_attention else "eager",
                fp8=fp8_linear.formats(self.profile.family) if self.job.fp8_matmuls else None)
        return _shared_trace(self.config, work, self.projector(lnc))

    # --- shapes every part needs -------------------------------------------------------------
    def stage_parameters(self, layout: Layout) -> float:
        """TP-local parameters of the largest pipeline stage: its share of the layers plus the
        embeddings and heads (which the first and last stages hold; counted on one, conservatively)."""
        p = self.parameters(layout.tp, 1)
        layers = self.config.num_hidden_layers
        rest = p.tp_local - layers * p.layer_unsharded
        return layers // layout.pp * p.layer_unsharded + rest

    def weight_bytes(self, tp: int) -> float:
        """One TP rank's stored weights: the projections in the weight dtype, the rest in the
        parameter dtype (norms, biases, embedding tables)."""
        p = self.parameters(tp, 1)
        return (p.matmul_tp_local * self.weight_dtype.itemsize
                + (p.tp_local - p.matmul_tp_local) * self.job.dtype.itemsize)

    def kv_cache_bytes(self, layout: Layout, tokens: int) -> int:
        """Keys and values of ``tokens`` positions, every layer, this rank's KV heads (a replicated
        head counts whole on every rank that holds it)."""
        heads = self.heads(layout.tp)
        if heads is None or self.kind != "decoder":
            return 0
        return (2 * self.config.num_hidden_layers * layout.batch * tokens * heads.kv_heads_per_rank
                * head_dim(self.config) * self.job.compute_dtype.itemsize)

    def link(self, ranks, layout: Layout) -> str:
        return link_for_ranks(list(ranks), self.cores_per_instance(layout.lnc), self.projector(layout.lnc).device)


# Projectors by (instance, LNC, calibration): a kernel signature is projected once per process for
# them. Traces by (config, workload, projector), the last ones made (the oldest is dropped first): a
# trace records its kernels' costs in its projector, so it is shared only with the plans that share
# the projector.
_PROJECTORS: dict[tuple[str, int, str], Projector] = {}
_TRACES: dict[tuple, TraceResult] = {}
_TRACES_KEPT = 256


def _shared_projector(instance: str, lnc: int, calibration: Calibration) -> Projector:
    key = (instance, lnc, repr(calibration))
    if key not in _PROJECTORS:
        _PROJECTORS[key] = Projector(instance, lnc, calibration)
    return _PROJECTORS[key]


def _shared_trace(config, work: Workload, projector: Projector) -> TraceResult:
    key = (type(config).__name__, config.to_json_string(use_diff=False), work, projector)
    if key not in _TRACES:
        if len(_TRACES) >= _TRACES_KEPT:
            del _TRACES[next(iter(_TRACES))]
        _TRACES[key] = trace(config, work, projector)
    return _TRACES[key]
