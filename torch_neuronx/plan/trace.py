"""Trace one rank's step on fake tensors: memory by ``torch.distributed._tools.mem_tracker``,
kernels and their projected costs by the projection package, one recording per graph
(forward and backward of a training micro-batch; prefill and one decode step of inference).

The rank's share of the model under TP is the same model with ``heads / tp``,
``kv_heads / tp`` (at least one: KV heads are replicated when TP exceeds them),
``intermediate / tp`` and ``vocab / tp`` (the LM head sharded on the vocabulary,
i.e. loss-parallel logits). That model is traced with 1 and with 2 decoder
layers; every figure is affine in the layer count (all decoder layers are
identical), so ``k`` layers are ``f(1) + (k - 1) × (f(2) - f(1))``: the whole
model, or one pipeline stage's share. Nothing is allocated on the host.

The fake tensors live on the ``neuron`` device, so PyTorch's composite ops take the device's
branches (fused dropout, the device's attention choice, the device's autocast lists), and
``ProjectionMode`` counts the kernels the eager device would launch (``projection/device_dispatch.py``;
the backward's gradient sums in place where the device sums in place, ``projection/gradient_sums.py``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import warnings
from collections import Counter

import torch

from ..projection import ProjectionMode, Projector
from .heads import HeadLayout
from ..testing.decoding import cache_argument

DEVICE = "neuron"  # the device the fake tensors claim: the eager path's dispatch, traced
_PER_RANK_FIELDS = ("intermediate_size", "vocab_size")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one rank runs: train (forward + backward of one micro-batch) or infer (a decoder's
    prefill + one decode step; an encoder's forward)."""

    mode: str  # "train" | "infer"
    tp: int
    batch: int  # sequences per micro-batch of one data-parallel rank
    seq_len: int  # training sequence, or the prompt
    dtype: torch.dtype  # the parameters' dtype
    checkpointing: bool = False
    autocast: bool = False  # bf16 compute over fp32 parameters
    max_len: int = 0  # infer: the static KV cache's positions (0: an encoder, which keeps none)
    heads: HeadLayout | None = None  # the heads at this TP (padded / replicated); None: split evenly
    rank_parameters: int = 0  # one layer's parameters on one TP rank (sharding.py), to check the rank's model
    attention: str = "sdpa"  # "sdpa": one fused attention kernel; "eager": scores materialized (matmul, softmax, matmul)


@dataclasses.dataclass
class TraceResult:
    """Figures at 1 and 2 traced layers; ``at(k)`` extrapolates to ``k`` layers."""

    activation_bytes: tuple[float, float]  # peak of activations + temporaries
    calls: dict[str, tuple[Counter, Counter]]  # graph name → signature counts of the eager kernels
    converts: dict[str, tuple[Counter, Counter]]  # graph name → signature counts of the casts (no kernel)
    layers: int
    tp_scale: float = 1.0  # < 1: the whole model was traced and a rank's work is this share of it

    def activations(self, layers: int | float | None = None) -> float:
        one, two = self.activation_bytes
        return _affine(one, max(one, two), self.layers if layers is None else layers) * self.tp_scale

    def per_layer_activations(self) -> float:
        one, two = self.activation_bytes
        return max(0.0, two - one) * self.tp_scale

    def graph_calls(self, graph: str, layers: int | float | None = None) -> Counter:
        """The eager kernels the device launches for ``graph`` at ``layers`` layers."""
        return _counts_at(self.calls[graph], self.layers if layers is None else layers)

    def graph_converts(self, graph: str, layers: int | float | None = None) -> Counter:
        """The dtype casts of ``graph`` (no eager kernel; a ``convert`` once compiled)."""
        return _counts_at(self.converts[graph], self.layers if layers is None else layers)

    @property
    def method(self) -> str:
        traced = f"1 and 2 of {self.layers} layers traced, scaled by the layer count"
        if self.tp_scale == 1:
            return traced
        return (f"{traced}; the architecture sizes its attention from the hidden size, so one TP rank's "
                f"work is {self.tp_scale:.4g} of the whole model's (padding included), not a traced rank")


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def rank_config(config, tp: int, layers: int, heads: HeadLayout | None = None):
    """The config of one TP rank's share of the model, with ``layers`` decoder layers: its padded
    query heads and its KV heads (``heads.py``), ``ceil(n / tp)`` of the MLP and vocabulary."""
    from transformers import AutoConfig

    data = config.to_dict()
    data.pop("layer_types", None)
    if tp > 1:
        if heads is not None:
            fixed = getattr(type(config), "head_dim", None)  # Falcon derives it, read-only, from the hidden size
            if not (isinstance(fixed, property) and fixed.fset is None):
                data["head_dim"] = head_dim(config)
            data["num_attention_heads"] = heads.heads_per_rank
            if "num_key_value_heads" in data or getattr(config, "num_key_value_heads", None):
                data["num_key_value_heads"] = heads.kv_heads_per_rank
        for field in _PER_RANK_FIELDS:
            if field in data and data[field]:
                data[field] = -(-data[field] // tp)
    data["num_hidden_layers"] = layers
    model_type = data.pop("model_type")
    return AutoConfig.for_model(model_type, **data)


def build_model(config, model_config=None, **kwargs):
    """The Transformers class ``config`` names (``architectures``, else a causal LM), built from
    ``model_config`` (default: ``config`` itself)."""
    import transformers

    for name in getattr(config, "architectures", None) or ():
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls._from_config(model_config or config, **kwargs)
    return transformers.AutoModelForCausalLM.from_config(model_config or config, **kwargs)


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


@contextlib.contextmanager
def _reentered_modules_tolerated():
    """The tracker warns (on stderr, in its own format) when a module runs inside its own forward,
    as Transformers' rotary embedding does through the ``kernels`` layer wrapping it, whose
    fallback calls the module again. The nested call is counted like any other and the trace only
    reads memory totals, so the warning says nothing about the plan: it is silenced, and the
    warning format the tracker replaces process-wide is put back."""
    saved_format = warnings.formatwarning
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The module hierarchy tracking maybe be messed up")
        try:
            yield
        finally:
            warnings.formatwarning = saved_format


def _training_inputs(model, ids: torch.Tensor, checkpointing: bool) -> dict:
    """Inputs with labels for the model's own loss (a masked LM also gets its next-sentence label).

    With activation checkpointing Transformers turns the key/value cache off itself, after printing
    a notice that the two are incompatible; ``use_cache=False`` does the same without the notice.
    Without checkpointing the call stays the user's (the model's default), so the trace matches the
    step the device runs."""
    inputs = {"input_ids": ids, "labels": ids}
    if checkpointing and "use_cache" in inspect.signature(model.forward).parameters:
        inputs["use_cache"] = False
    if "next_sentence_label" in inspect.signature(model.forward).parameters:
        inputs["next_sentence_label"] = torch.zeros(ids.shape[0], dtype=torch.long)
    return inputs


def _serve(model, work: Workload, ids, tracker, projector: Projector) -> dict[str, ProjectionMode]:
    """An encoder's forward of the batch; a decoder's context encoding (the prompt attends to
    itself, causally, and its keys and values are written out), then one decode step against a
    static cache of ``max_len`` positions (every decode step has these shapes: attention reads all
    ``max_len`` positions under its mask, as the static-cache path does). The static cache is
    allocated outside the memory tracker and the recording, as a server allocates it once: the
    plan counts it on its own (``memory.py``)."""
    model.eval()
    with torch.no_grad():
        if not work.max_len:
            with tracker, ProjectionMode(projector) as forward:
                model(input_ids=ids)
            return {"forward": forward}
        from transformers import StaticCache

        with tracker, ProjectionMode(projector) as prefill:
            model(input_ids=ids, use_cache=True)
        step = {"input_ids": ids[:, :1], "use_cache": True, "cache_position": torch.tensor([work.seq_len]),
                cache_argument(model): StaticCache(config=model.config, max_cache_len=work.max_len)}
        model(**step)  # the cache's first update allocates it, outside the recording
        with ProjectionMode(projector) as decode:
            model(**step)
    return {"prefill": prefill, "decode": decode}


def _built(config, cfg, work: Workload):
    """The rank's model with the workload's attention; an architecture Transformers gives no SDPA
    attention (Gemma-2, BLOOM, GPT-OSS) keeps its own, which computes the scores in full."""
    try:
        return build_model(config, cfg, dtype=work.dtype, attn_implementation=work.attention)
    except ValueError as exc:
        if "scaled_dot_product_attention" not in str(exc):
            raise
        return build_model(config, cfg, dtype=work.dtype, attn_implementation="eager")


def _run(config, cfg, work: Workload, projector: Projector) -> tuple[float, dict[str, ProjectionMode]]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    autocast = torch.autocast(DEVICE, dtype=torch.bfloat16) if work.autocast else contextlib.nullcontext()
    with _reentered_modules_tolerated(), FakeTensorMode(), torch.device(DEVICE):
        model = _built(config, cfg, work)
        ids = torch.zeros(work.batch, work.seq_len, dtype=torch.long)
        tracker = _activation_tracker()
        tracker.track_external(model)
        if work.mode != "train":
            runs = _serve(model, work, ids, tracker, projector)
            return float(tracker.activation_peak), runs
        model.train()
        if work.checkpointing:
            model.activation_checkpointing_enable({"use_reentrant": False})
        with tracker:
            with ProjectionMode(projector) as fwd, autocast:
                loss = model(**_training_inputs(model, ids, work.checkpointing)).loss
            with ProjectionMode(projector) as bwd:
                bwd.backward(loss)
    return float(tracker.activation_peak), {"forward": fwd, "backward": bwd}


def _affine(one, two, layers):
    return one + (layers - 1) * (two - one)


def _counts_at(pair: tuple[Counter, Counter], layers: int | float) -> Counter:
    one, two = pair
    return Counter({key: round(_affine(one.get(key, 0), two.get(key, 0), layers)) for key in one.keys() | two.keys()})


def _layer_parameters(config, cfg) -> int:
    """Parameters of one layer of the model ``cfg`` builds (on the meta device)."""
    from .tp_plan import FIRST_LAYER

    with torch.device("meta"):
        model = build_model(config, cfg)
    return sum(p.numel() for n, p in model.named_parameters() if FIRST_LAYER.search(n))


def _rank_layer(config, work: Workload) -> int | None:
    """Parameters of one layer of the rank's model, or None when its config is refused (a
    per-rank head count the architecture's own checks reject, a read-only ``head_dim``)."""
    from huggingface_hub.errors import StrictDataclassError

    try:
        return _layer_parameters(config, rank_config(config, work.tp, 1, work.heads))
    except (ValueError, TypeError, AttributeError, StrictDataclassError):
        return None


def trace(config, work: Workload, projector: Projector) -> TraceResult:
    """Trace ``work`` for one rank with 1 and 2 decoder layers.

    The rank's model is built from its config (``rank_config``) when the architecture sizes its
    layers from the config's head and MLP counts: its layer must hold the rank's parameters
    (``work.rank_parameters``). An architecture that derives the head size from the hidden size
    (GPT-2, BERT, OPT, ...) cannot be shrunk that way; the whole model is traced and a rank's
    work is its share of the layer's parameters (``tp_scale``), padding included."""
    scale = 1.0
    if work.tp > 1 and work.rank_parameters and _rank_layer(config, work) != work.rank_parameters:
        scale = work.rank_parameters / _layer_parameters(config, rank_config(config, 1, 1))
    tp = work.tp if scale == 1 else 1
    a1, r1 = _run(config, rank_config(config, tp, 1, work.heads), work, projector)
    a2, r2 = _run(config, rank_config(config, tp, 2, work.heads), work, projector)
    return TraceResult((a1, a2), {g: (r1[g].calls, r2[g].calls) for g in r1},
                       {g: (r1[g].converts, r2[g].converts) for g in r1}, config.num_hidden_layers, scale)


def optimizer_calls(numel: int, dtype: torch.dtype, projector: Projector) -> Counter:
    """The kernels of one AdamW step over this rank's parameter shard (one flat tensor, foreach)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), torch.device(DEVICE):
        p = torch.nn.Parameter(torch.zeros(numel, dtype=dtype))
        p.grad = torch.zeros_like(p)
        opt = torch.optim.AdamW([p], lr=1e-5, foreach=True)
        opt.step()  # first step creates the state; the steady-state step is the one projected
        with ProjectionMode(projector) as run:
            opt.step()
    return run.calls
