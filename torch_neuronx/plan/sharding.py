"""Per-rank parameter bytes under the model's own tensor-parallel plan and FSDP2.

The TP plan is Transformers' ``base_model_tp_plan`` (what ``examples/sft_tp_fsdp.py``
applies): ``colwise`` shards a weight's dim 0 (and its bias), ``rowwise`` its
dim 1; the LM head is sharded on dim 0 (vocab). When TP exceeds the KV heads,
each rank holds one whole KV head (replicated over ``tp / kv_heads`` ranks, as
NxD does). FSDP2 then shards dim 0 of each TP-local parameter over the FSDP
ranks, padded to a multiple of the FSDP size. A model without a TP plan (an
encoder such as BERT) runs at TP=1 only.
"""
from __future__ import annotations

import fnmatch
import math
import re

import torch


def tp_style(config, name: str) -> str | None:
    """The TP style that applies to parameter ``name`` (``model.layers.0.self_attn.q_proj.weight``)."""
    if name.startswith("lm_head."):
        return "colwise"
    module = name.removeprefix("model.").rsplit(".", 1)[0]
    for pattern, style in (getattr(config, "base_model_tp_plan", None) or {}).items():
        if fnmatch.fnmatchcase(module, pattern.replace("*", "[0-9]*")):
            return style.removeprefix("local_")
    return None


def tp_local_shape(shape: torch.Size, style: str | None, is_bias: bool, tp: int) -> tuple[int, ...]:
    shape = list(shape)
    if style and style.startswith("colwise"):
        shape[0] //= tp
    elif style and style.startswith("rowwise") and not is_bias:
        shape[1] //= tp
    return tuple(shape)


def fsdp_local_numel(shape: tuple[int, ...], fsdp: int) -> int:
    """FSDP2's padded shard of dim 0: ``ceil(dim0 / fsdp) × the other dims``."""
    if not shape:
        return 1
    return math.ceil(shape[0] / fsdp) * math.prod(shape[1:])


_KV_PROJECTIONS = ("k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias")
_FIRST_LAYER = re.compile(r"(^|\.)layers?\.0\.")


def kv_heads_per_rank(config, tp: int) -> int:
    """KV heads one TP rank holds: ``kv / tp``, or one replicated head when TP exceeds them."""
    kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return -(-kv // tp)


def meta_model(config):
    """The whole model on the meta device: names and shapes, no memory."""
    from .trace import build_model

    with torch.device("meta"):
        return build_model(config)


def per_rank_parameters(config, tp: int, fsdp: int) -> dict:
    """Exact parameter counts: whole model, one rank (TP- and FSDP-sharded, with padding), one
    TP rank before FSDP, one decoder layer unsharded by FSDP (what an all-gather brings in), and
    the TP-local embedding tables (a lookup reads only the rows it needs)."""
    from .trace import head_dim

    model = meta_model(config)
    total = rank = tp_local = layer_gathered = 0
    lookup = {f"{m}.weight" for m, mod in model.named_modules() if isinstance(mod, torch.nn.Embedding)}
    embeddings = 0
    for name, p in model.named_parameters():
        style = tp_style(config, name)
        local = tp_local_shape(p.shape, style, name.endswith(".bias"), tp)
        if style and name.endswith(_KV_PROJECTIONS):  # whole heads: one replicated head when tp > kv
            local = (kv_heads_per_rank(config, tp) * head_dim(config),) + local[1:]
        total += p.numel()
        rank += fsdp_local_numel(local, fsdp)
        tp_local += math.prod(local)
        if _FIRST_LAYER.search(name):
            layer_gathered += math.prod(local)
        if name in lookup:
            embeddings += math.prod(local)
    return {"total": total, "per_rank": rank, "tp_local": tp_local, "layer_unsharded": layer_gathered,
            "embedding_tp_local": embeddings}
