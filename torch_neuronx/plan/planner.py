"""A plan: per-rank HBM, first-run compilations, step time and cost of one layout,
the smallest change that fits when it does not, and a sweep over layouts.

Memory and kernel counts come from the fake-tensor trace (``trace.py``) and the
exact sharded parameter count (``sharding.py``). The planner gathers one rank's
work (graphs, collectives, micro-batches) and hands it to ``projection.job``,
which owns every projected figure: compiled and eager time, the pipeline bubble,
accumulation, the fitted factors and their error band. Every figure is labelled:
``projected`` (device model), ``emulated`` (counted by tracing) or ``assumed``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter

import torch

from ..projection import CollectiveRecord, GraphProgram, Projector, defaults, link_for_ranks
from ..projection import job
from ..runtime.errors import UsageError, UserError
from ..runtime.profiles import GiB, get_profile
from .model_config import check_tp, load_config
from .sharding import kv_heads_per_rank, per_rank_parameters
from .trace import TraceResult, Workload, head_dim, optimizer_calls, trace

RUNTIME_RESERVE_BYTES = 1 * GiB  # assumed: Neuron runtime, NEFFs and scratch per core; no published figure
# precision → (parameter dtype, compute dtype): autocast keeps fp32 master weights and optimizer state
PRECISIONS = {"bf16": (torch.bfloat16, torch.bfloat16), "fp16": (torch.float16, torch.float16),
              "fp32": (torch.float32, torch.float32), "autocast-bf16": (torch.float32, torch.bfloat16)}
SHARDS = ("fsdp", "zero1", "none")
EXECUTIONS = ("compile", "eager")


@dataclasses.dataclass(frozen=True)
class Layout:
    tp: int
    dp: int
    batch: int  # micro-batch: sequences per data-parallel rank per micro-step
    checkpointing: bool
    lnc: int
    instances: int
    pp: int = 1
    shard: str = "fsdp"  # how data parallelism shards: fsdp (everything), zero1 (optimizer state), none
    global_batch: int | None = None  # sequences per optimizer step; None: one micro-batch per rank
    sequence_parallel: bool = False  # split the hidden-state elementwise work over the TP group

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def sequences_per_step(self) -> int:
        return self.global_batch or self.batch * self.dp

    @property
    def micro_batches(self) -> int:
        return job.accumulation_steps(self.sequences_per_step, self.batch, self.dp)

    def rank(self, tp: int, dp: int, pp: int) -> int:
        """Global rank: TP innermost (inside a chip or instance), then DP, then pipeline stages."""
        return tp + self.tp * (dp + self.dp * pp)


class Planner:
    """Plans for one model, instance type, sequence length, mode and precision; caches traces."""

    def __init__(self, model: str, instance: str, seq_len: int, mode: str = "train", dtype: str = "bf16",
                 decode_tokens: int = 128, price_per_hour: float | None = None, execution: str = "compile",
                 factors: job.Factors | None = None) -> None:
        if mode not in ("train", "infer"):
            raise UsageError(f"mode {mode!r} is not train or infer")
        if dtype not in PRECISIONS:
            raise UsageError(f"--precision {dtype!r} is not one of {', '.join(PRECISIONS)}")
        if execution not in EXECUTIONS:
            raise UsageError(f"--mode {execution!r} is not one of {', '.join(EXECUTIONS)}")
        if seq_len < 1 or decode_tokens < 0:
            raise UsageError("--seq-len/--input-len must be >= 1 and --output-len >= 0")
        self.model, self.config = model, load_config(model)
        self.profile = get_profile(instance)
        self.seq_len, self.mode, self.dtype_name, self.execution = seq_len, mode, dtype, execution
        self.dtype, self.compute_dtype = PRECISIONS[dtype]
        self.decode_tokens, self.price_per_hour = decode_tokens, price_per_hour
        self.factors = factors or job.fitted_factors()
        self._projectors: dict[int, Projector] = {}
        if mode == "infer" and "CausalLM" not in self.model_kind(self.config):
            raise UsageError(f"--infer needs a causal LM; {self.model!r} is {self.model_kind(self.config)}")

    @staticmethod
    def model_kind(config) -> str:
        return (getattr(config, "architectures", None) or ["CausalLM"])[0]

    # --- validation and cached pieces -------------------------------------------------
    def cores_per_instance(self, lnc: int) -> int:
        return self.profile.logical_cores(lnc)

    def check(self, layout: Layout) -> None:
        if min(layout.tp, layout.dp, layout.pp, layout.batch, layout.instances) < 1:
            raise UsageError("--tp, --pp, --dp, --micro-batch/--batch-size and --instances must be >= 1")
        if layout.shard not in SHARDS:
            raise UsageError(f"--shard {layout.shard!r} is not one of {', '.join(SHARDS)}")
        if layout.lnc not in self.profile.allowed_lnc:
            raise UsageError(f"LNC={layout.lnc} is not supported on {self.profile.name} "
                             f"(allowed: {', '.join(map(str, self.profile.allowed_lnc))})")
        check_tp(self.config, layout.tp)
        layers = self.config.num_hidden_layers
        if layers % layout.pp:
            raise UsageError(f"--pp {layout.pp} does not divide the model's {layers} layers")
        if layout.pp > 1 and self.mode == "infer":
            raise UsageError("--pp is modelled for training only")
        layout.micro_batches  # noqa: B018  raises when G is not divisible by M·D
        cores = self.cores_per_instance(layout.lnc) * layout.instances
        if layout.world > cores:
            raise UsageError(f"world size tp×pp×dp = {layout.world} is larger than the {cores} logical cores "
                             f"of {layout.instances}×{self.profile.name} at LNC={layout.lnc}")

    def projector(self, lnc: int) -> Projector:
        if lnc not in self._projectors:
            self._projectors[lnc] = Projector(self.profile.name, lnc, self.factors.calibration(defaults()))
        return self._projectors[lnc]

    @functools.lru_cache(maxsize=None)
    def parameters(self, tp: int, dp: int) -> dict:
        return per_rank_parameters(self.config, tp, dp)

    @functools.lru_cache(maxsize=None)
    def traced(self, tp: int, batch: int, checkpointing: bool, lnc: int) -> TraceResult:
        train = self.mode == "train"
        work = Workload(self.mode, tp, batch, self.seq_len, self.dtype, checkpointing and train,
                        autocast=self.dtype != self.compute_dtype,
                        decode_cache_len=self.seq_len + self.decode_tokens // 2)
        return trace(self.config, work, self.projector(lnc))

    def stage_parameters(self, layout: Layout) -> float:
        """TP-local parameters of the largest pipeline stage: its share of the layers plus the
        embeddings and heads (which the first and last stages hold; counted on one, conservatively)."""
        p = self.parameters(layout.tp, 1)
        layers = self.config.num_hidden_layers
        rest = p["tp_local"] - layers * p["layer_unsharded"]
        return layers // layout.pp * p["layer_unsharded"] + rest

    # --- memory --------------------------------------------------------------------------
    def memory(self, layout: Layout) -> dict:
        """Per-rank HBM in bytes by kind, against the logical core's HBM."""
        item = self.dtype.itemsize
        train = self.mode == "train"
        stage = self.stage_parameters(layout)
        if layout.shard == "fsdp" and layout.pp == 1:
            sharded = self.parameters(layout.tp, layout.dp)["per_rank"]  # exact, with FSDP2's padding
        else:
            sharded = math.ceil(stage / layout.dp) if layout.shard != "none" else stage
        held = sharded if layout.shard == "fsdp" else stage  # parameters and gradients
        layer = self.parameters(layout.tp, 1)["layer_unsharded"] * item
        gathered = layer if layout.shard == "fsdp" and layout.dp > 1 else 0
        parts = {
            "parameters": held * item,
            "gradients": held * item if train else 0,
            "optimizer_state": 2 * sharded * item if train else 0,  # AdamW exp_avg + exp_avg_sq
            "activations_peak": self.activations(layout, layout.checkpointing),
            # FSDP2: the current and the prefetched layer gathered, plus one layer's unsharded gradients
            "collective_buffers": (2 * gathered + (gathered if train else 0)),
            "runtime_reserve": RUNTIME_RESERVE_BYTES,
        }
        if not train:
            parts["kv_cache_growth"] = self.kv_cache_bytes(layout, self.decode_tokens)
        total = sum(parts.values())
        hbm = self.profile.hbm_per_logical_core(layout.lnc)
        out = {"label": "emulated (traced on fake tensors); runtime_reserve assumed",
               "bytes": parts, "total_bytes": total, "hbm_bytes": hbm, "fits": total <= hbm}
        if train:
            key = "activations_peak_without_checkpointing" if layout.checkpointing else \
                "activations_peak_with_checkpointing"
            out[key] = self.activations(layout, not layout.checkpointing)
        return out

    def activations(self, layout: Layout, checkpointing: bool) -> float:
        """Peak activations of the stage: one micro-batch through its layers, plus the saved
        activations of the other micro-batches a 1F1B first stage holds in flight (min(P, m))."""
        t = self.traced(layout.tp, layout.batch, checkpointing, layout.lnc)
        layers = self.config.num_hidden_layers // layout.pp
        in_flight = min(layout.pp, layout.micro_batches) if self.mode == "train" else 1
        return t.activations(layers) + (in_flight - 1) * layers * t.per_layer_activations()

    def kv_cache_bytes(self, layout: Layout, tokens: int) -> int:
        """Keys and values of ``tokens`` positions, every layer, this rank's KV heads (a replicated
        head counts whole on every rank that holds it)."""
        cfg = self.config
        return (2 * cfg.num_hidden_layers * layout.batch * tokens * kv_heads_per_rank(cfg, layout.tp)
                * head_dim(cfg) * self.compute_dtype.itemsize)

    # --- the work of one rank --------------------------------------------------------------
    def _link(self, ranks, layout: Layout) -> str:
        return link_for_ranks(list(ranks), self.cores_per_instance(layout.lnc), self.projector(layout.lnc).device)

    def _efa_sharing(self, layout: Layout, group_of) -> int:
        """How many groups of one instance's ranks cross the instance at once (they share its EFA)."""
        per = min(self.cores_per_instance(layout.lnc), layout.world)
        return len({group_of(r) for r in range(per)})

    def tp_collectives(self, layout: Layout) -> Counter:
        """TP all-reduces of the hidden states of one micro-batch on one stage: two per layer per
        pass (forward, backward, and the recompute when checkpointing)."""
        records: Counter = Counter()
        if layout.tp == 1:
            return records
        cfg, item = self.config, self.compute_dtype.itemsize
        layers = cfg.num_hidden_layers // layout.pp
        link = self._link(range(layout.tp), layout)
        if self.mode == "train":
            passes = 3 if layout.checkpointing else 2
            nbytes = layout.batch * self.seq_len * cfg.hidden_size * item
            records[CollectiveRecord("all_reduce", nbytes, layout.tp, link)] += 2 * layers * passes
        return records

    def pipeline_sends(self, layout: Layout) -> tuple[Counter, dict]:
        """Per micro-batch: the activations sent to the next stage and their gradients sent back,
        each TP rank its 1/TP slice, all ranks of an instance at once over the link between stages."""
        if layout.pp == 1:
            return Counter(), {}
        nbytes = layout.batch * self.seq_len * self.config.hidden_size * self.compute_dtype.itemsize // layout.tp
        link = self._link((0, layout.rank(0, 0, 1)), layout)
        rec = CollectiveRecord("send", nbytes, 2, link)
        sharing = self.cores_per_instance(layout.lnc) if link == "efa" else 1
        return Counter({rec: 2}), {rec: min(sharing, layout.world // layout.pp)}

    def dp_collectives(self, layout: Layout) -> tuple[Counter, Counter, dict]:
        """(per micro-batch, per global batch, EFA sharing): FSDP gathers the stage's parameters in
        forward and backward of every micro-batch; the gradients are reduced once per global
        batch (all-reduce; reduce-scatter under ZeRO-1 and FSDP, then ZeRO-1 all-gathers the
        updated parameters). Replicated KV heads all-reduce their gradients over their replicas."""
        micro, step = Counter(), Counter()
        train, item = self.mode == "train", self.dtype.itemsize
        stage_bytes = self.stage_parameters(layout) * item
        sharing = {}
        if layout.dp > 1 and train:
            link = self._link([layout.rank(0, d, 0) for d in range(layout.dp)], layout)
            share = self._efa_sharing(layout, lambda r: (r % layout.tp, r // (layout.tp * layout.dp))) \
                if link == "efa" else 1
            dp = layout.dp
            kinds = {"none": [("all_reduce", step)], "zero1": [("reduce_scatter", step), ("all_gather", step)],
                     "fsdp": [("reduce_scatter", step)]}[layout.shard]
            for kind, where in kinds:
                where[CollectiveRecord(kind, stage_bytes, dp, link)] += 1
            if layout.shard == "fsdp":
                micro[CollectiveRecord("all_gather", stage_bytes, dp, link)] += 2
            sharing = {rec: share for rec in micro | step}
        kv = getattr(self.config, "num_key_value_heads", None)
        if train and kv and layout.tp > kv:
            replicas = layout.tp // kv
            kv_bytes = (2 * head_dim(self.config) * self.config.hidden_size * item
                        * (self.config.num_hidden_layers // layout.pp))
            step[CollectiveRecord("all_reduce", kv_bytes, replicas, self._link(range(replicas), layout))] += 1
        return micro, step, sharing

    def _graph(self, layout: Layout, name: str, calls: Counter, io_bytes: float,
               converts: Counter | None = None) -> job.GraphWork:
        proj = self.projector(layout.lnc)
        sp = job.SequenceParallel(layout.tp, self.config.hidden_size) \
            if layout.sequence_parallel and layout.tp > 1 else None
        return job.graph_work(name, proj.kernels, calls, io_bytes, proj.device, proj.calibration, sp, converts)

    def training_work(self, layout: Layout) -> tuple[job.TrainingWork, dict[str, float]]:
        """One rank's work per global batch, and the eager (per-op) seconds of each graph."""
        proj = self.projector(layout.lnc)
        t = self.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc)
        layers = self.config.num_hidden_layers
        stage_layers = layers // layout.pp
        m = layout.micro_batches
        weights = self.stage_parameters(layout) * self.dtype.itemsize
        # embedding tables are not read whole: a lookup reads the rows it needs
        read = weights - self.parameters(layout.tp, 1)["embedding_tp_local"] * self.dtype.itemsize
        saved = t.activations(stage_layers)
        grads = weights * (2 if m > 1 else 1)  # written, and read back while accumulating
        fwd_calls, bwd_calls = t.graph_calls("forward", stage_layers), t.graph_calls("backward", stage_layers)
        opt_numel = math.ceil(self.stage_parameters(layout) / (layout.dp if layout.shard != "none" else 1))
        opt_calls = optimizer_calls(opt_numel, self.dtype, proj)
        graphs = {
            "forward": self._graph(layout, "forward", fwd_calls, read + saved,
                                   t.graph_converts("forward", stage_layers)),
            "backward": self._graph(layout, "backward", bwd_calls, read + saved + grads,
                                    t.graph_converts("backward", stage_layers)),
            # read parameter, gradient and two moments; write parameter and moments
            "optimizer": self._graph(layout, "optimizer", opt_calls, 7 * opt_numel * self.dtype.itemsize),
        }
        eager = {name: proj.summary(calls)["device_seconds"]
                 for name, calls in (("forward", fwd_calls), ("backward", bwd_calls), ("optimizer", opt_calls))}
        whole = (self._graph(layout, "model", t.graph_calls("forward") + t.graph_calls("backward"), 0).flops
                 * layout.tp * layout.sequences_per_step / layout.batch)
        sends, send_sharing = self.pipeline_sends(layout)
        dp_micro, dp_step, dp_sharing = self.dp_collectives(layout)
        cal, device = proj.calibration, proj.device
        work = job.TrainingWork(
            forward=graphs["forward"], backward=graphs["backward"], optimizer=graphs["optimizer"],
            micro_comm=job.comm_work(self.tp_collectives(layout) + sends + dp_micro, device, cal,
                                     send_sharing | dp_sharing),
            step_comm=job.comm_work(dp_step, device, cal, dp_sharing),
            micro_batches=m, pp=layout.pp, tokens_per_step=layout.sequences_per_step * self.seq_len,
            model_flops_per_step=whole, peak_flops_per_rank=device.tensor_flops["bf16"], ranks=layout.world)
        return work, eager

    def inference_work(self, layout: Layout) -> tuple[job.InferenceWork, dict[str, float]]:
        proj = self.projector(layout.lnc)
        t = self.traced(layout.tp, layout.batch, False, layout.lnc)
        p = self.parameters(layout.tp, 1)
        weights = (p["tp_local"] - p["embedding_tp_local"]) * self.dtype.itemsize  # tables: rows looked up
        prompt = self.kv_cache_bytes(layout, self.seq_len)
        mean_cache = self.kv_cache_bytes(layout, self.seq_len + self.decode_tokens // 2)
        prefill_calls, decode_calls = t.graph_calls("prefill"), t.graph_calls("decode")
        prefill = self._graph(layout, "prefill", prefill_calls, weights + prompt, t.graph_converts("prefill"))
        decode = self._graph(layout, "decode", decode_calls, weights + mean_cache, t.graph_converts("decode"))
        eager = {"prefill": proj.summary(prefill_calls)["device_seconds"],
                 "decode": proj.summary(decode_calls)["device_seconds"]}
        comm = {}
        for name, tokens in (("prefill", self.seq_len), ("decode", 1)):
            records = Counter()
            if layout.tp > 1:
                nbytes = layout.batch * tokens * self.config.hidden_size * self.compute_dtype.itemsize
                records[CollectiveRecord("all_reduce", nbytes, layout.tp, self._link(range(layout.tp), layout))] = \
                    2 * self.config.num_hidden_layers
            comm[name] = job.comm_work(records, proj.device, proj.calibration)
        work = job.InferenceWork(prefill, decode, comm["prefill"], comm["decode"], layout.batch, self.decode_tokens)
        return work, eager

    # --- time and cost -------------------------------------------------------------------
    @staticmethod
    def _band(figure: str = "step_seconds") -> dict:
        band = job.error_band(figure)
        return {"error_band": band.text(), "error_band_fraction": band.fraction,
                "error_band_applies_to": "compile mode (the published results ran compiled graphs)"}

    def time(self, layout: Layout) -> dict:
        proj = self.projector(layout.lnc)
        if self.mode == "train":
            work, eager = self.training_work(layout)
            traced = self.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc)
            kernels = len(+(traced.graph_calls("forward") + traced.graph_calls("backward")))
            graphs = (work.forward, work.backward, work.optimizer)
            modes = {m: dataclasses.asdict(job.training_time(work, self.factors, m, eager)) for m in EXECUTIONS}
            chosen = modes[self.execution]
            cost = job.job_cost(proj, chosen["step_seconds"], work.tokens_per_step, layout.instances,
                                self.price_per_hour)
            out = {"label": "projected", "mode": self.execution, **chosen, **self._band(),
                   "tokens_per_step": work.tokens_per_step, "micro_batches": work.micro_batches,
                   "flops_per_step": work.model_flops_per_step,
                   "usd_per_step": cost.usd, "usd_per_billion_tokens": cost.usd_per_billion_tokens,
                   "price": cost.price, "by_mode": modes,
                   "graphs": {g.name: dataclasses.asdict(g) for g in (work.forward, work.backward, work.optimizer)},
                   "collectives": {"per_micro_batch": dataclasses.asdict(work.micro_comm),
                                   "per_global_batch": dataclasses.asdict(work.step_comm)}}
        else:
            work, eager = self.inference_work(layout)
            kernels = len(+(self.traced(layout.tp, layout.batch, False, layout.lnc).graph_calls("prefill")))
            graphs = (work.prefill, work.decode)
            modes = {m: dataclasses.asdict(job.inference_time(work, self.factors, m, eager)) for m in EXECUTIONS}
            chosen = modes[self.execution]
            cost = job.job_cost(proj, chosen["request_seconds"], layout.batch * self.decode_tokens,
                                layout.instances, self.price_per_hour)
            ttft, tpot = self._band("ttft_seconds"), self._band("tpot_seconds")
            out = {"label": "projected", "mode": self.execution, **chosen, **tpot,
                   "ttft_error_band": ttft["error_band"], "ttft_error_band_fraction": ttft["error_band_fraction"],
                   "usd_per_request": cost.usd, "usd_per_billion_tokens": cost.usd_per_billion_tokens,
                   "usd_per_million_output_tokens": cost.usd_per_million_tokens,
                   "price": cost.price, "by_mode": modes,
                   "graphs": {g.name: dataclasses.asdict(g) for g in (work.prefill, work.decode)}}
        compiled = (proj.compile(0, [GraphProgram(g.kernels) for g in graphs]) if self.execution == "compile"
                     else proj.compile(kernels, []))
        out["compile"] = {**compiled.to_dict(), "distinct_kernels": kernels,
                          "distinct_kernels_label": "emulated (distinct kernel signatures traced)"}
        return out

    # --- one plan, suggestions, sweep ------------------------------------------------------
    def plan(self, layout: Layout, suggest: bool = True) -> dict:
        self.check(layout)
        memory = self.memory(layout)
        t = self.time(layout)
        result = {"model": self.model, "model_type": self.config.model_type, "instance": self.profile.name,
                  "mode": self.mode, "dtype": self.dtype_name, "precision": self.dtype_name, "seq_len": self.seq_len,
                  "layout": dataclasses.asdict(layout) | {"world": layout.world,
                                                          "micro_batches": layout.micro_batches},
                  "parameters": {"label": "emulated (exact count)", **self.parameters(layout.tp, layout.dp)},
                  "method": self.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc).method,
                  "memory": memory, "time": t}
        if self.mode == "infer":
            result["inference"] = {k: t[k] for k in ("label", "mode", "ttft_seconds", "tpot_seconds",
                                                     "tokens_per_second", "usd_per_million_output_tokens",
                                                     "error_band", "ttft_error_band")} | {"batch_size": layout.batch,
                                                                       "input_len": self.seq_len,
                                                                       "output_len": self.decode_tokens}
        if suggest and not memory["fits"]:
            result["suggestion"] = self.suggest(layout)
        return result

    def _fits(self, layout: Layout) -> bool:
        try:
            self.check(layout)
        except UserError:  # the layout is not valid here (a flag combination or the projection refuses it)
            return False
        return self.memory(layout)["fits"]

    def suggest(self, layout: Layout) -> dict | None:
        """The smallest change that fits: one knob first (checkpointing, more data parallelism,
        smaller micro-batch, LNC), then checkpointing with more data parallelism, then more instances."""
        rep = dataclasses.replace
        cores = self.cores_per_instance(layout.lnc) * layout.instances
        free = cores // (layout.tp * layout.pp)
        more_dp = [rep(layout, dp=f, global_batch=None) for f in range(layout.dp + 1, free + 1)
                   if (f & (f - 1)) == 0 or f == free]
        ckpt = [rep(layout, checkpointing=True)] if self.mode == "train" and not layout.checkpointing else []
        smaller = [rep(layout, batch=b) for b in (layout.batch // 2 ** k for k in range(1, 8)) if b >= 1]
        lnc = [rep(layout, lnc=n) for n in self.profile.allowed_lnc if n > layout.lnc]
        both = [rep(c, checkpointing=True) for c in more_dp] if ckpt else []
        for candidate in ckpt + more_dp + smaller + lnc + both:
            if self._fits(candidate):
                return {"change": _diff(layout, candidate), "layout": dataclasses.asdict(candidate),
                        "memory_total_bytes": self.memory(candidate)["total_bytes"]}
        for n in range(layout.instances + 1, 65):  # more instances, full data parallelism, checkpointing
            per = self.cores_per_instance(layout.lnc)
            candidate = rep(layout, instances=n, dp=per * n // (layout.tp * layout.pp), global_batch=None,
                            checkpointing=layout.checkpointing or self.mode == "train")
            if self._fits(candidate):
                return {"change": _diff(layout, candidate), "layout": dataclasses.asdict(candidate),
                        "memory_total_bytes": self.memory(candidate)["total_bytes"]}
        return None

    def sweep(self, layout: Layout) -> list[dict]:
        """Every TP (power of two dividing the heads, within one instance) × DP (filling the
        instances, the layout's pipeline and sharding kept) × micro-batch (the given one and
        halves), with and without checkpointing, that fits, ranked by projected cost per token."""
        cores = self.cores_per_instance(layout.lnc) * layout.instances
        rows = []
        tps = [t for t in (2 ** k for k in range(7)) if t <= self.cores_per_instance(layout.lnc)]
        for tp in tps:
            try:
                check_tp(self.config, tp)
            except UserError:
                continue
            for batch in sorted({max(1, layout.batch // 2 ** k) for k in range(3)}, reverse=True):
                for ckpt in ((False, True) if self.mode == "train" else (False,)):
                    candidate = dataclasses.replace(layout, tp=tp, dp=cores // (tp * layout.pp), batch=batch,
                                                    checkpointing=ckpt, global_batch=None)
                    if not self._fits(candidate):
                        continue
                    t = self.time(candidate)
                    step = t.get("step_seconds", t.get("request_seconds"))
                    rows.append({"layout": dataclasses.asdict(candidate),
                                 "memory_total_bytes": self.memory(candidate)["total_bytes"],
                                 "step_seconds": step, "tokens_per_second": t["tokens_per_second"],
                                 "mfu": t.get("mfu"),
                                 "usd_per_billion_tokens": t["usd_per_billion_tokens"]})
        rows.sort(key=lambda r: (r["usd_per_billion_tokens"] or math.inf, r["step_seconds"]))
        return rows


def _diff(a: Layout, b: Layout) -> str:
    changes = [f"{f.name} {getattr(a, f.name)} → {getattr(b, f.name)}" for f in dataclasses.fields(Layout)
               if getattr(a, f.name) != getattr(b, f.name)]
    return ", ".join(changes)
