"""A plan: per-rank HBM, first-run compilations, step time and cost of one layout,
the smallest change that fits when it does not, and a sweep over layouts.

Memory and kernel counts come from the fake-tensor trace (``trace.py``) and the
exact sharded parameter count (``sharding.py``); time, compile time and cost
from the projection package. Every figure is labelled: ``projected`` (device
model), ``emulated`` (counted by tracing) or ``assumed``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter

import torch

from ..projection import CollectiveRecord, Projector, link_for_ranks
from ..runtime.errors import ConfigError
from ..runtime.profiles import GiB, get_profile
from .model_config import check_tp, load_config
from .sharding import per_rank_parameters
from .trace import Workload, optimizer_calls, trace

RUNTIME_RESERVE_BYTES = 1 * GiB  # assumed: Neuron runtime, NEFFs and scratch per core; no published figure
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclasses.dataclass(frozen=True)
class Layout:
    tp: int
    fsdp: int
    batch: int  # sequences per data-parallel (FSDP) rank
    checkpointing: bool
    lnc: int
    instances: int

    @property
    def world(self) -> int:
        return self.tp * self.fsdp


class Planner:
    """Plans for one model, instance type, sequence length, mode and dtype; caches traces."""

    def __init__(self, model: str, instance: str, seq_len: int, mode: str = "train", dtype: str = "bf16",
                 decode_tokens: int = 128, price_per_hour: float | None = None) -> None:
        if mode not in ("train", "infer"):
            raise ConfigError(f"mode {mode!r} is not train or infer")
        if dtype not in DTYPES:
            raise ConfigError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if seq_len < 1 or decode_tokens < 0:
            raise ConfigError("--seq-len must be >= 1 and --decode-tokens >= 0")
        self.model, self.config = model, load_config(model)
        self.profile = get_profile(instance)
        self.seq_len, self.mode, self.dtype_name = seq_len, mode, dtype
        self.dtype = DTYPES[dtype]
        self.decode_tokens, self.price_per_hour = decode_tokens, price_per_hour
        self._projectors: dict[int, Projector] = {}

    # --- validation and cached pieces -------------------------------------------------
    def cores_per_instance(self, lnc: int) -> int:
        return self.profile.logical_cores(lnc)

    def check(self, layout: Layout) -> None:
        if min(layout.tp, layout.fsdp, layout.batch, layout.instances) < 1:
            raise ConfigError("--tp, --fsdp, --batch-size and --instances must be >= 1")
        if layout.lnc not in self.profile.allowed_lnc:
            raise ConfigError(f"LNC={layout.lnc} is not supported on {self.profile.name} "
                              f"(allowed: {', '.join(map(str, self.profile.allowed_lnc))})")
        check_tp(self.config, layout.tp)
        cores = self.cores_per_instance(layout.lnc) * layout.instances
        if layout.world > cores:
            raise ConfigError(f"world size tp×fsdp = {layout.world} is larger than the {cores} logical cores "
                              f"of {layout.instances}×{self.profile.name} at LNC={layout.lnc}")

    def projector(self, lnc: int) -> Projector:
        if lnc not in self._projectors:
            self._projectors[lnc] = Projector(self.profile.name, lnc)
        return self._projectors[lnc]

    @functools.lru_cache(maxsize=None)
    def parameters(self, tp: int, fsdp: int) -> dict:
        return per_rank_parameters(self.config, tp, fsdp)

    @functools.lru_cache(maxsize=None)
    def traced(self, tp: int, batch: int, checkpointing: bool, lnc: int):
        work = Workload(self.mode, tp, batch, self.seq_len, self.dtype, checkpointing and self.mode == "train")
        return trace(self.config, work, self.projector(lnc))

    # --- memory --------------------------------------------------------------------------
    def memory(self, layout: Layout) -> dict:
        """Per-rank HBM in bytes by kind, against the logical core's HBM."""
        item = self.dtype.itemsize
        p = self.parameters(layout.tp, layout.fsdp)
        train = self.mode == "train"
        gathered = p["layer_unsharded"] * item if layout.fsdp > 1 else 0
        parts = {
            "parameters": p["per_rank"] * item,
            "gradients": p["per_rank"] * item if train else 0,
            "optimizer_state": 2 * p["per_rank"] * item if train else 0,  # AdamW exp_avg + exp_avg_sq
            "activations_peak": self.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc)
            .activation_bytes,
            # FSDP2: the current and the prefetched layer gathered, plus one layer's unsharded gradients
            "collective_buffers": (2 * gathered + (gathered if train else 0)),
            "runtime_reserve": RUNTIME_RESERVE_BYTES,
        }
        if not train:
            parts["kv_cache_growth"] = self.kv_cache_growth(layout)
        total = sum(parts.values())
        hbm = self.profile.hbm_per_logical_core(layout.lnc)
        out = {"label": "emulated (traced on fake tensors); runtime_reserve assumed",
               "bytes": parts, "total_bytes": total, "hbm_bytes": hbm, "fits": total <= hbm}
        if train:
            other = self.traced(layout.tp, layout.batch, not layout.checkpointing, layout.lnc).activation_bytes
            key = "activations_peak_without_checkpointing" if layout.checkpointing else \
                "activations_peak_with_checkpointing"
            out[key] = other
        return out

    def kv_cache_growth(self, layout: Layout) -> int:
        """Inference: what the KV cache grows by over the decode steps (the prompt's part is in the
        traced activations): keys and values of every layer, this rank's KV heads."""
        cfg = self.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return (2 * cfg.num_hidden_layers * layout.batch * self.decode_tokens
                * (cfg.num_key_value_heads // layout.tp) * head_dim * self.dtype.itemsize)

    # --- time and cost -------------------------------------------------------------------
    def collectives(self, layout: Layout) -> Counter:
        """The step's collectives: FSDP2 all-gathers (forward and backward) and reduce-scatters per
        layer, TP all-reduces of the hidden states (two per layer per pass)."""
        item, cfg = self.dtype.itemsize, self.config
        per_instance = self.cores_per_instance(layout.lnc)
        device = self.projector(layout.lnc).device
        records: Counter = Counter()
        layers = cfg.num_hidden_layers
        p = self.parameters(layout.tp, layout.fsdp)
        train = self.mode == "train"
        if layout.fsdp > 1:
            link = link_for_ranks([i * layout.tp for i in range(layout.fsdp)], per_instance, device)
            layer = p["layer_unsharded"] * item
            rest = p["tp_local"] * item - layers * layer
            for nbytes, n in ((layer, layers), (rest, 1)):
                records[CollectiveRecord("all_gather", nbytes, layout.fsdp, link)] += n * (2 if train else 1)
                if train:
                    records[CollectiveRecord("reduce_scatter", nbytes, layout.fsdp, link)] += n
        if layout.tp > 1:
            link = link_for_ranks(range(layout.tp), per_instance, device)
            tokens = layout.batch * self.seq_len
            passes = (3 if layout.checkpointing else 2) if train else 1
            records[CollectiveRecord("all_reduce", tokens * cfg.hidden_size * item, layout.tp, link)] += \
                2 * layers * passes
            if not train and self.decode_tokens:
                records[CollectiveRecord("all_reduce", layout.batch * cfg.hidden_size * item, layout.tp,
                                         link)] += 2 * layers * self.decode_tokens
        return records

    def time(self, layout: Layout) -> dict:
        proj = self.projector(layout.lnc)
        t = self.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc)
        calls = Counter(t.calls)
        if self.mode == "train":
            p = self.parameters(layout.tp, layout.fsdp)
            calls += optimizer_calls(p["per_rank"], self.dtype, proj)
            tokens = layout.batch * self.seq_len * layout.fsdp
        else:  # prefill once, then decode_tokens decode steps (each projected at the prompt's cache length)
            calls.subtract(t.decode_calls)
            for key, n in t.decode_calls.items():
                calls[key] += n * self.decode_tokens
            tokens = layout.batch * self.decode_tokens * layout.fsdp
        compute = proj.summary(+calls)
        comm = proj.collectives_summary(self.collectives(layout))
        step = compute["device_seconds"] + comm["seconds"]
        cost = proj.cost(step, 1, self.price_per_hour, instances=layout.instances)
        usd = cost.run_usd
        compile_ = proj.compile(len(+calls)).to_dict()
        return {
            "label": "projected",
            "compute_seconds": compute["device_seconds"],
            "compute_bound_seconds": compute["compute_bound_seconds"],
            "memory_bound_seconds": compute["memory_bound_seconds"],
            "launch_overhead_seconds": compute["launch_overhead_seconds"],
            "collective_seconds": comm["seconds"], "collectives_by_link": comm["by_link"],
            "collectives_unprojected": comm["unprojected"],
            "step_seconds_no_overlap": step,
            "step_seconds_full_overlap": max(compute["device_seconds"], comm["seconds"]),
            "tokens_per_step": tokens, "tokens_per_second": tokens / step if step and tokens else None,
            "mfu": proj.mfu(compute["flops"], step), "flops_per_rank": compute["flops"],
            "usd_per_step": usd,
            "usd_per_billion_tokens": usd / tokens * 1e9 if usd is not None and tokens else None,
            "price": cost.price.to_dict(),
            "compile": {**compile_, "distinct_kernels_label": "emulated (distinct kernel signatures traced)"},
        }

    # --- one plan, suggestions, sweep ------------------------------------------------------
    def plan(self, layout: Layout, suggest: bool = True) -> dict:
        self.check(layout)
        memory = self.memory(layout)
        result = {"model": self.model, "model_type": self.config.model_type, "instance": self.profile.name,
                  "mode": self.mode, "dtype": self.dtype_name, "seq_len": self.seq_len,
                  "layout": dataclasses.asdict(layout) | {"world": layout.world},
                  "parameters": {"label": "emulated (exact count)",
                                 **self.parameters(layout.tp, layout.fsdp)},
                  "method": self.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc).layers_traced,
                  "memory": memory, "time": self.time(layout)}
        if suggest and not memory["fits"]:
            result["suggestion"] = self.suggest(layout)
        return result

    def _fits(self, layout: Layout) -> bool:
        try:
            self.check(layout)
        except ConfigError:
            return False
        return self.memory(layout)["fits"]

    def suggest(self, layout: Layout) -> dict | None:
        """The smallest change that fits: one knob first (checkpointing, more FSDP, smaller batch,
        LNC), then checkpointing with more FSDP, then more instances."""
        rep = dataclasses.replace
        cores = self.cores_per_instance(layout.lnc) * layout.instances
        more_fsdp = [rep(layout, fsdp=f) for f in range(layout.fsdp + 1, cores // layout.tp + 1)
                     if (layout.tp * f) & (layout.tp * f - 1) == 0 or layout.tp * f == cores]
        ckpt = [rep(layout, checkpointing=True)] if self.mode == "train" and not layout.checkpointing else []
        smaller = [rep(layout, batch=b) for b in (layout.batch // 2 ** k for k in range(1, 8)) if b >= 1]
        lnc = [rep(layout, lnc=n) for n in self.profile.allowed_lnc if n > layout.lnc]
        both = [rep(c, checkpointing=True) for c in more_fsdp] if ckpt else []
        for candidate in ckpt + more_fsdp + smaller + lnc + both:
            if self._fits(candidate):
                return {"change": _diff(layout, candidate), "layout": dataclasses.asdict(candidate),
                        "memory_total_bytes": self.memory(candidate)["total_bytes"]}
        for n in range(layout.instances + 1, 65):  # more instances, full FSDP over them, checkpointing
            per = self.cores_per_instance(layout.lnc)
            candidate = rep(layout, instances=n, fsdp=per * n // layout.tp,
                            checkpointing=layout.checkpointing or self.mode == "train")
            if self._fits(candidate):
                return {"change": _diff(layout, candidate), "layout": dataclasses.asdict(candidate),
                        "memory_total_bytes": self.memory(candidate)["total_bytes"]}
        return None

    def sweep(self, layout: Layout) -> list[dict]:
        """Every TP (power of two dividing the heads, within one instance) × FSDP (filling the
        instances) × batch (the given one and halves), with and without checkpointing, that fits,
        ranked by projected cost per token (then step time)."""
        cores = self.cores_per_instance(layout.lnc) * layout.instances
        rows = []
        tps = [t for t in (2 ** k for k in range(7)) if t <= self.cores_per_instance(layout.lnc)]
        for tp in tps:
            try:
                check_tp(self.config, tp)
            except ConfigError:
                continue
            for batch in sorted({max(1, layout.batch // 2 ** k) for k in range(3)}, reverse=True):
                for ckpt in ((False, True) if self.mode == "train" else (False,)):
                    candidate = dataclasses.replace(layout, tp=tp, fsdp=cores // tp, batch=batch,
                                                    checkpointing=ckpt)
                    if not self._fits(candidate):
                        continue
                    t = self.time(candidate)
                    rows.append({"layout": dataclasses.asdict(candidate),
                                 "memory_total_bytes": self.memory(candidate)["total_bytes"],
                                 "step_seconds": t["step_seconds_no_overlap"],
                                 "tokens_per_second": t["tokens_per_second"], "mfu": t["mfu"],
                                 "usd_per_billion_tokens": t["usd_per_billion_tokens"]})
        rows.sort(key=lambda r: (r["usd_per_billion_tokens"] or math.inf, r["step_seconds"]))
        return rows


def _diff(a: Layout, b: Layout) -> str:
    changes = [f"{f.name} {getattr(a, f.name)} → {getattr(b, f.name)}" for f in dataclasses.fields(Layout)
               if getattr(a, f.name) != getattr(b, f.name)]
    return ", ".join(changes)
