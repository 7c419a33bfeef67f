"""Trace one rank's step on fake tensors: memory by ``torch.distributed._tools.mem_tracker``,
kernels and device time by the projection package.

The rank's share of the model under TP is the same model with ``heads / tp``,
``kv_heads / tp``, ``intermediate / tp`` and ``vocab / tp`` (the LM head
sharded on the vocabulary, i.e. loss-parallel logits). That model is traced
with 1 and with 2 decoder layers; every figure is affine in the layer count
(all decoder layers are identical), so the whole model is
``f(1) + (layers - 1) × (f(2) - f(1))``. Nothing is allocated on the host.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import torch

from ..projection import ProjectionMode, Projector

_PER_RANK_FIELDS = ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one rank runs: train (forward + backward) or infer (prefill + decode)."""

    mode: str  # "train" | "infer"
    tp: int
    batch: int  # sequences per data-parallel rank
    seq_len: int
    dtype: torch.dtype
    checkpointing: bool = False


@dataclasses.dataclass
class TraceResult:
    activation_bytes: float  # peak activations + temporaries of the whole model (extrapolated)
    calls: Counter  # signature key -> calls for the whole model (extrapolated)
    decode_calls: Counter  # infer only: one decode step
    layers_traced: str


def rank_config(config, tp: int, layers: int):
    """The config of one TP rank's share of the model, with ``layers`` decoder layers."""
    from transformers import AutoConfig

    data = config.to_dict()
    data.pop("layer_types", None)
    data["head_dim"] = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    for field in _PER_RANK_FIELDS:
        data[field] = -(-data[field] // tp)
    data["num_hidden_layers"] = layers
    model_type = data.pop("model_type")
    return AutoConfig.for_model(model_type, **data)


def _activation_tracker():
    """A ``MemTracker`` that also keeps the peak of activations + temporaries on their own.

    The tracker's own peak is the peak of the *total*, which for a big model's
    rank is the end of backward (all gradients, activations freed); activations
    must be sized at their own peak. ``_update_peak_stats`` is the tracker's
    per-allocation hook.
    """
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class ActivationPeakTracker(MemTracker):
        activation_peak = 0

        def _update_peak_stats(self, peak_state) -> None:
            super()._update_peak_stats(peak_state)
            for snap in self._curr_mem_snap.values():
                now = snap.get(_MemRefType.ACT, 0) + snap.get(_MemRefType.TEMP, 0)
                self.activation_peak = max(self.activation_peak, now)

    return ActivationPeakTracker()


def _run(config, work: Workload, layers: int, projector: Projector) -> tuple[float, Counter, Counter]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM

    cfg = rank_config(config, work.tp, layers)
    decode = Counter()
    with FakeTensorMode():
        model = AutoModelForCausalLM.from_config(cfg, dtype=work.dtype, attn_implementation="sdpa")
        ids = torch.zeros(work.batch, work.seq_len, dtype=torch.long)
        tracker = _activation_tracker()
        tracker.track_external(model)
        with tracker, ProjectionMode(projector) as run:
            if work.mode == "train":
                model.train()
                if work.checkpointing:
                    model.activation_checkpointing_enable({"use_reentrant": False})
                model(input_ids=ids, labels=ids).loss.backward()
            else:
                model.eval()
                with torch.no_grad():
                    out = model(input_ids=ids, use_cache=True)
                    tracker.reset_mod_stats()  # the tracker refuses a second call of a module otherwise
                    with ProjectionMode(projector) as step:
                        model(input_ids=ids[:, :1], past_key_values=out.past_key_values, use_cache=True)
                    decode = step.calls
    return float(tracker.activation_peak), run.calls, decode


def _affine(one, two, layers: int):
    return one + (layers - 1) * (two - one)


def _affine_counts(one: Counter, two: Counter, layers: int) -> Counter:
    return Counter({k: _affine(one.get(k, 0), two.get(k, 0), layers) for k in one.keys() | two.keys()})


def trace(config, work: Workload, projector: Projector) -> TraceResult:
    """Trace ``work`` for one rank with 1 and 2 decoder layers and extrapolate to the model's layers."""
    layers = config.num_hidden_layers
    a1, c1, d1 = _run(config, work, 1, projector)
    a2, c2, d2 = _run(config, work, 2, projector)
    # a peak can sit outside the layers (the logits): a layer never adds less than nothing
    return TraceResult(activation_bytes=_affine(a1, max(a1, a2), layers), calls=_affine_counts(c1, c2, layers),
                       decode_calls=_affine_counts(d1, d2, layers),
                       layers_traced=f"1 and 2 of {layers} decoder layers traced, scaled by the layer count")


def optimizer_calls(numel: int, dtype: torch.dtype, projector: Projector) -> Counter:
    """The kernels of one AdamW step over this rank's parameter shard (one flat tensor, foreach)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        p = torch.nn.Parameter(torch.zeros(numel, dtype=dtype))
        p.grad = torch.zeros_like(p)
        opt = torch.optim.AdamW([p], lr=1e-5, foreach=True)
        opt.step()  # first step creates the state; the steady-state step is the one projected
        with ProjectionMode(projector) as run:
            opt.step()
    return run.calls
