"""Which parameters tensor parallelism shards, and how: the model's own Transformers TP plan
where it names a module, else the Megatron-style plan derived from the module structure.

Megatron-LM's layout (https://arxiv.org/abs/1909.08053, §3), which NeuronX Distributed's
``ColumnParallelLinear`` / ``RowParallelLinear`` implement: inside every decoder or encoder
layer the projections that read the hidden states (query, key, value, a fused QKV, the MLP's
up and gate) are column-parallel (output features split), and the projections that write
them back (the attention output, the MLP's down) are row-parallel (input features split), so
each layer needs one all-reduce after attention and one after the MLP. The LM head is split
on the vocabulary; the input embedding too when asked (``vocab_parallel``, NxD's
``ParallelEmbedding``). Norms, biases of row-parallel layers, routers and low-rank
projections stay whole on every rank.

A projection is recognised by its name (the names Transformers' architectures use), else by
its shape: one that reads the hidden size and writes something else is column-parallel, one
that writes the hidden size from something else is row-parallel.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re

LAYER = re.compile(r"(^|\.)(layers?|h|blocks?|block)\.(\d+)\.")  # group 3: the layer's index
FIRST_LAYER = re.compile(r"(^|\.)(layers?|h|blocks?|block)\.0\.")
QUERY = frozenset({"q_proj", "query", "q_lin", "wq", "q_b_proj"})
KEY_VALUE = frozenset({"k_proj", "v_proj", "key", "value", "k_lin", "v_lin", "wk", "wv"})
FUSED_QKV = frozenset({"qkv_proj", "c_attn", "query_key_value", "wqkv", "w_pack"})
COLUMN = QUERY | KEY_VALUE | FUSED_QKV | frozenset({
    "gate_proj", "up_proj", "gate_up_proj", "fc1", "c_fc", "dense_h_to_4h", "w1", "w3", "fc_in", "lin1",
    "kv_b_proj", "wi", "wi_0", "wi_1"})
ROW = frozenset({"o_proj", "out_proj", "c_proj", "dense_4h_to_h", "down_proj", "fc2", "w2", "fc_out", "out_lin",
                 "lin2", "wo", "dense"})
WHOLE = frozenset({"gate", "router", "q_a_proj", "kv_a_proj_with_mqa", "score"})  # routers, low-rank inputs


@dataclasses.dataclass(frozen=True)
class Sharded:
    """How one parameter is split over the TP group."""

    style: str  # "colwise" (output features), "rowwise" (input features), "vocab" or "replicated"
    kind: str  # "query", "key_value", "qkv", "attention_out", "mlp" or "other": what its split follows
    source: str  # "transformers" (the model's own plan) or "derived"
    transposed: bool = False  # GPT-2's Conv1D keeps its weight as (in, out)


REPLICATED = Sharded("replicated", "other", "derived")


def _transformers_style(config, module: str) -> str | None:
    for pattern, style in (getattr(config, "base_model_tp_plan", None) or {}).items():
        if fnmatch.fnmatchcase(module, pattern.replace("*", "[0-9]*")):
            return style
    return None


def _kind(leaf: str, parent: str, style: str) -> str:
    if leaf in QUERY:
        return "query"
    if leaf in KEY_VALUE:
        return "key_value"
    if leaf in FUSED_QKV:
        return "qkv"
    if style == "rowwise" and re.search(r"attn|attention", parent):
        return "attention_out"
    return "mlp"


def _derived_style(leaf: str, parent: str, shape: tuple[int, ...], hidden: int, transposed: bool) -> str | None:
    if leaf in WHOLE:
        return None
    if leaf == "dense" and parent.endswith("intermediate"):  # BERT's intermediate.dense reads the hidden states
        return "colwise"
    if leaf in COLUMN:
        return "colwise"
    if leaf in ROW:
        return "rowwise"
    if len(shape) != 2:
        return None
    out, inp = (shape[1], shape[0]) if transposed else shape
    if inp == hidden and out != hidden:
        return "colwise"
    if out == hidden and inp != hidden:
        return "rowwise"
    return None


def sharding_of(config, name: str, shape: tuple[int, ...], module_type: str, vocab_parallel: bool,
                embedding: bool) -> Sharded:
    """How parameter ``name`` (its module of type ``module_type``) is split over TP."""
    module, _, leaf_param = name.rpartition(".")
    base = re.sub(r"^(model|transformer|bert|roberta|distilbert|gpt_neox|base_model)\.", "", module)
    transposed = module_type == "Conv1D"
    if embedding:
        given = _transformers_style(config, base)
        if given == "embedding_rowwise" or vocab_parallel:
            return Sharded("vocab", "other", "transformers" if given else "derived")
        return REPLICATED
    if module.endswith("lm_head") or module == "lm_head":
        return Sharded("vocab", "other", "transformers" if getattr(config, "base_model_tp_plan", None) else "derived")
    if not LAYER.search(name) or leaf_param not in ("weight", "bias"):
        return REPLICATED
    parent, _, leaf = module.rpartition(".")
    given = _transformers_style(config, base)
    source = "transformers"
    style = None
    if given:
        stripped = given.removeprefix("local_")
        style = ("colwise" if stripped.startswith(("colwise", "packed_colwise")) else
                 "rowwise" if stripped.startswith(("rowwise", "packed_rowwise")) else None)
    if style is None:
        source = "derived"
        style = _derived_style(leaf.lower(), parent.lower(), shape, config.hidden_size, transposed)
    if style is None:
        return REPLICATED
    return Sharded(style, _kind(leaf.lower(), parent.lower(), style), source, transposed)


def plan_source(shardings: list[Sharded]) -> str:
    """Which plan the sharded parameters followed, in one phrase."""
    sources = {s.source for s in shardings if s.style != "replicated"}
    if sources == {"transformers"}:
        return "the model's Transformers TP plan"
    if sources == {"derived"}:
        return "a Megatron-style plan derived from the module structure (the model defines none)"
    if not sources:
        return "no tensor parallelism"
    return "the model's Transformers TP plan, completed Megatron-style where it names no module"
