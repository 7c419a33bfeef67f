"""Build any causal-LM architecture tiny, from its config class, offline.

The shrinking is data: a table of config attributes and the tiny value each
gets (applied only where the config has the attribute), list attributes with
one entry per layer cut to the new depth, special-token ids kept inside the
shrunk vocabulary, and per-architecture overrides for the few configs whose
constraints the generic table cannot meet.
"""
from __future__ import annotations

import torch

TINY_LAYERS = 2
TINY_VOCAB = 512

# attribute -> tiny value; hidden 64 with 4 query heads and 2 key/value heads (head_dim 16).
GENERIC = {
    "hidden_size": 64, "n_embd": 64, "d_model": 64, "embed_dim": 64, "word_embed_proj_dim": 64,
    "num_hidden_layers": TINY_LAYERS, "n_layer": TINY_LAYERS, "num_layers": TINY_LAYERS,
    "n_layers": TINY_LAYERS, "decoder_layers": TINY_LAYERS, "encoder_layers": TINY_LAYERS,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "decoder_attention_heads": 4,
    "encoder_attention_heads": 4, "num_key_value_heads": 2, "num_kv_heads": 2, "multi_query_group_num": 2,
    "head_dim": 16, "kv_channels": 16,
    "intermediate_size": 128, "n_inner": 128, "ffn_dim": 128, "decoder_ffn_dim": 128, "encoder_ffn_dim": 128,
    "ffn_hidden_size": 128, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "n_shared_experts": 1, "num_shared_experts": 1,
    "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "rotary_dim": 8, "attention_hidden_size": 64, "embedding_dim": 64,
    "vocab_size": TINY_VOCAB,
    "max_position_embeddings": 256, "n_positions": 256, "n_ctx": 256,
}
TOKEN_ID_ATTRS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id",
                  "cls_token_id", "unk_token_id", "mask_token_id")
LAYER_COUNT_ATTRS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")

# Configs whose own constraints the generic table breaks, found by running the sweep.
OVERRIDES: dict[str, dict] = {
    "mamba2": {"num_heads": 8, "head_dim": 16, "n_groups": 1},  # heads × head_dim = expand × hidden
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
}


def _keep_layers(config, values: dict, old_layers: int) -> None:
    """Cut per-layer lists to a few layers, keeping one layer of every kind they mention.

    Hybrid models (linear + full attention, sliding + global) break when the
    first layers happen to be of one kind only, so the kept layers are the
    first of each distinct value, topped up with the earliest others.
    """
    per_layer = {a: v for a, v in values.items() if isinstance(v, list) and len(v) == old_layers}
    firsts: set[int] = set()
    for value in per_layer.values():
        seen: set[str] = set()
        for i, item in enumerate(value):
            if repr(item) not in seen:
                seen.add(repr(item))
                firsts.add(i)
    others = [i for i in range(old_layers) if i not in firsts]
    indices = sorted(firsts | set(others[: max(0, TINY_LAYERS - len(firsts))]))
    for attr, value in per_layer.items():
        setattr(config, attr, [value[i] for i in indices])
    for attr in LAYER_COUNT_ATTRS:
        if isinstance(values.get(attr), int):
            setattr(config, attr, len(indices))


def _shrink(config) -> None:
    old_layers = next((getattr(config, a) for a in LAYER_COUNT_ATTRS if isinstance(getattr(config, a, None), int)),
                      None)
    values = config.to_dict()
    for attr, value in GENERIC.items():
        if attr in values and (values[attr] is None or isinstance(values[attr], int)) and values[attr] != 0:
            setattr(config, attr, value)
    if "qk_rope_head_dim" in values and "head_dim" in values:
        config.head_dim = GENERIC["qk_rope_head_dim"]  # multi-head latent attention ropes head_dim dims
    if "kv_lora_rank" in values and "num_key_value_heads" in values:
        config.num_key_value_heads = GENERIC["num_attention_heads"]  # MLA caches one key/value per head
    if old_layers and old_layers != TINY_LAYERS:
        _keep_layers(config, values, old_layers)
    vocab = getattr(config, "vocab_size", TINY_VOCAB) or TINY_VOCAB
    for i, attr in enumerate(TOKEN_ID_ATTRS):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value >= vocab:
            setattr(config, attr, i % 3)
        elif isinstance(value, list):
            setattr(config, attr, [v if v < vocab else i % 3 for v in value])
    for attr, value in list(values.items()):  # nested configs (text / decoder sub-configs)
        sub = getattr(config, attr, None)
        if hasattr(sub, "to_dict") and hasattr(sub, "model_type") and sub is not config:
            _shrink(sub)


def tiny_config(model_type: str):
    """The architecture's default config, shrunk; raises if the config class cannot be built."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    _shrink(config)
    config.is_decoder = True  # BERT-style encoders in the causal-LM mapping need it
    for attr, value in OVERRIDES.get(model_type, {}).items():
        setattr(config, attr, value)
    return config


def build_tiny(model_type: str, seed: int = 0):
    """A float32 causal LM of ``model_type`` with seeded random weights, in eval mode."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
