"""Exact per-rank parameter counts under tensor parallelism (``tp_plan.py``, heads padded as
``heads.py`` says) and FSDP2.

Column-parallel weights split their output features over TP, row-parallel ones their input
features; a split that follows attention heads gives each rank its padded heads (query and
output projections) and its KV heads (key and value), any other split ``ceil(n / tp)`` (the
last ranks' rows padded). FSDP2 then shards dim 0 of each TP-local parameter over the FSDP
ranks, padded to a multiple of the FSDP size.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from .heads import HeadLayout, config_heads
from .tp_plan import FIRST_LAYER, LAYER, Sharded, plan_source, sharding_of


@dataclasses.dataclass(frozen=True)
class RankTensor:
    """One parameter of one TP rank: its shape, whether it is a projection's weight (stored in
    the weight dtype when serving) and the index of its decoder layer (None outside the layers)."""

    shape: tuple[int, ...]
    matmul: bool
    layer: int | None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class ParameterCounts:
    """Parameter elements of the whole model and of one rank (emulated: exact counts)."""

    total: int
    per_rank: int  # TP- and FSDP-sharded, with FSDP2's padding
    tp_local: int  # one TP rank before FSDP
    layer_unsharded: int  # one layer of one TP rank (what an FSDP all-gather brings in)
    embedding_tp_local: int  # the embedding tables (a lookup reads only the rows it needs)
    matmul_tp_local: int  # weights of the projections (what weight-only quantization stores narrow)
    padding_tp_local: int  # elements the padded heads and rows add to one TP rank
    tp_plan: str  # which TP plan the split followed
    # One TP rank's parameters one by one (what the allocator places), not in ``to_dict``
    tensors: tuple[RankTensor, ...] = dataclasses.field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict:
        counts = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "tensors"}
        return {"label": "emulated (exact count)", **counts}


def fsdp_local_numel(shape: tuple[int, ...], fsdp: int) -> int:
    """FSDP2's padded shard of dim 0: ``ceil(dim0 / fsdp) × the other dims``."""
    if not shape:
        return 1
    return math.ceil(shape[0] / fsdp) * math.prod(shape[1:])


def kv_heads_per_rank(config, tp: int) -> int:
    """KV heads one TP rank holds (a replicated head counts whole on every rank that holds it)."""
    heads = config_heads(config, tp)
    return heads.kv_heads_per_rank if heads else 0


def _split(n: int, s: Sharded, heads: HeadLayout | None, head_dim: int, tp: int) -> tuple[int, float]:
    """The rank's share of a dimension of ``n`` that ``s`` splits, and its share without padding."""
    if heads is not None:
        per_head = {"query": heads.heads_per_rank, "attention_out": heads.heads_per_rank,
                    "key_value": heads.kv_heads_per_rank,
                    "qkv": heads.heads_per_rank + 2 * heads.kv_heads_per_rank}.get(s.kind)
        whole = {"query": heads.heads, "attention_out": heads.heads, "key_value": heads.kv_heads,
                 "qkv": heads.heads + 2 * heads.kv_heads}.get(s.kind)
        if per_head is not None and n == whole * head_dim:
            return per_head * head_dim, n / tp
    return -(-n // tp), n / tp


def tp_local_shape(shape: torch.Size, s: Sharded, is_bias: bool, tp: int, heads: HeadLayout | None = None,
                   head_dim: int = 0) -> tuple[tuple[int, ...], float]:
    """One TP rank's shape of a parameter, and its element count without padding."""
    shape = list(shape)
    exact = float(math.prod(shape))
    if s.style == "replicated" or tp == 1 or not shape:
        return tuple(shape), exact
    if s.style == "vocab":
        dim = 0
    elif s.style == "colwise":
        dim = 0 if is_bias or not s.transposed else 1
    elif is_bias:  # a row-parallel bias is added once, after the all-reduce
        return tuple(shape), exact
    else:
        dim = 0 if s.transposed else 1
    local, unpadded = _split(shape[dim], s, heads, head_dim, tp)
    exact = exact / shape[dim] * unpadded
    shape[dim] = local
    return tuple(shape), exact


def meta_model(config):
    """The whole model on the meta device: names and shapes, no memory."""
    from .trace import build_model

    with torch.device("meta"):
        return build_model(config)


def _embedding_names(model, config) -> tuple[set[str], set[str]]:
    """(every embedding table, the vocabulary tables among them)."""
    tables, vocab = set(), set()
    for m, mod in model.named_modules():
        if isinstance(mod, torch.nn.Embedding):
            tables.add(f"{m}.weight")
            if mod.num_embeddings == getattr(config, "vocab_size", None):
                vocab.add(f"{m}.weight")
    return tables, vocab


def per_rank_parameters(config, tp: int, fsdp: int, vocab_parallel: bool = False) -> ParameterCounts:
    """Exact counts (see ``ParameterCounts``); the model is built on the meta device."""
    from .trace import head_dim

    model = meta_model(config)
    heads = config_heads(config, tp)
    hd = head_dim(config) if heads else 0
    tables, vocab = _embedding_names(model, config)
    tied = not any(n.startswith("lm_head.") for n, _ in model.named_parameters()) and bool(vocab)
    modules = dict(model.named_modules())
    total = rank = tp_local = layer = embeddings = matmul = 0
    exact_total = 0.0
    shardings, tensors = [], []
    for name, p in model.named_parameters():
        owner = type(modules.get(name.rpartition(".")[0])).__name__
        s = sharding_of(config, name, tuple(p.shape), owner, vocab_parallel or tied, name in vocab)
        shardings.append(s)
        local, exact = tp_local_shape(p.shape, s, name.endswith(".bias"), tp, heads, hd)
        n = math.prod(local)
        total += p.numel()
        rank += fsdp_local_numel(local, fsdp)
        tp_local += n
        exact_total += exact
        layer += n if FIRST_LAYER.search(name) else 0
        embeddings += n if name in tables else 0
        matmul += n if p.dim() == 2 and name not in tables else 0
        in_layer = LAYER.search(name)
        tensors.append(RankTensor(local, p.dim() == 2 and name not in tables,
                                  int(in_layer.group(3)) if in_layer else None))
    return ParameterCounts(total, rank, tp_local, layer, embeddings, matmul, round(tp_local - exact_total),
                           plan_source(shardings) if tp > 1 else "no tensor parallelism", tuple(tensors))
