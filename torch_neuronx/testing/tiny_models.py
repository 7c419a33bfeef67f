"""Tiny Transformers models and a tokenizer, built offline from config classes: one place for the whole project.

The pilot's built-in model, the coverage sweep, the tests, the examples and
the distributed example all build their tiny models here. Any causal-LM
``model_type`` works: its default config is shrunk by a table of config
attributes and the tiny value each gets from a :class:`TinySize` (applied only
where the config has the attribute), list attributes with one entry per layer
are cut to the new depth, special-token ids are kept inside the shrunk
vocabulary, and a few architectures get overrides for constraints the generic
table cannot meet. Keyword overrides are applied last, by their config names.
"""
from __future__ import annotations

import dataclasses

import torch

PAD, BOS, EOS = 0, 1, 2  # special-token ids of the tiny tokenizer and of models built to match it


@dataclasses.dataclass(frozen=True)
class TinySize:
    """The few numbers every tiny model is built from (the default: hidden 64, 4 / 2 heads of 16)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    vocab: int = 512
    positions: int = 256

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _generic(size: TinySize) -> dict:
    """Config attribute -> tiny value, under every name the architectures of Transformers use."""
    h, d, n = size.hidden, size.head_dim, size.layers
    return {
        "hidden_size": h, "n_embd": h, "d_model": h, "embed_dim": h, "word_embed_proj_dim": h,
        "num_hidden_layers": n, "n_layer": n, "num_layers": n, "n_layers": n, "decoder_layers": n,
        "encoder_layers": n,
        "num_attention_heads": size.heads, "n_head": size.heads, "n_heads": size.heads,
        "decoder_attention_heads": size.heads, "encoder_attention_heads": size.heads,
        "num_key_value_heads": size.kv_heads, "num_kv_heads": size.kv_heads, "multi_query_group_num": size.kv_heads,
        "head_dim": d, "kv_channels": d,
        "intermediate_size": size.intermediate, "n_inner": size.intermediate, "ffn_dim": size.intermediate,
        "decoder_ffn_dim": size.intermediate, "encoder_ffn_dim": size.intermediate,
        "ffn_hidden_size": size.intermediate, "moe_intermediate_size": size.intermediate // 4,
        "shared_expert_intermediate_size": size.intermediate // 4,
        "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
        "num_experts_per_tok": 2, "moe_topk": 2, "n_shared_experts": 1, "num_shared_experts": 1,
        "n_group": 1, "topk_group": 1,
        "kv_lora_rank": d, "q_lora_rank": 2 * d, "qk_rope_head_dim": d // 2, "qk_nope_head_dim": d // 2,
        "v_head_dim": d, "rotary_dim": d // 2, "attention_hidden_size": h, "embedding_dim": h,
        "vocab_size": size.vocab, "vocab_size_per_layer_input": size.vocab,
        "max_position_embeddings": size.positions, "n_positions": size.positions, "n_ctx": size.positions,
    }


TOKEN_ID_ATTRS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id",
                  "cls_token_id", "unk_token_id", "mask_token_id")
LAYER_COUNT_ATTRS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")

# Configs whose own constraints the generic table breaks, or whose defaults in Transformers cannot be
# built at all, found by running the sweep. ``"a.b"`` sets ``b`` of the sub-config ``a``.
_ROPE = {"rope_theta": 10000.0, "rope_type": "default"}
_INDEXER = {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 16,
            "indexer_compress_ratio": 4}
OVERRIDES: dict[str, dict] = {
    "mamba2": {"num_heads": 8, "head_dim": 16, "n_groups": 1},  # heads × head_dim = expand × hidden
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "dbrx": {"attn_config.rope_theta": 10000.0, "attn_config.clip_qkv": 8.0},  # defaults: none, None (clamp fails)
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},  # the default leaves them unset
    "cohere_compass_text": {"rope_parameters": {"full_attention": _ROPE}},  # keyed by layer type, default empty
    "qwen4_exp": {f"text_config.{k}": v for k, v in _INDEXER.items()},  # the indexer sizes default to None
    "qwen4_exp_text": _INDEXER,
    "reformer": {"axial_pos_embds_dim": (32, 32), "axial_pos_shape": (16, 16), "attention_head_size": 16,
                 "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4, "num_buckets": 2},
    "gemma3n_text": {"num_kv_shared_layers": 0},
    "musicgen": {"num_codebooks": 1},  # input ids are (batch × codebooks, length): one codebook keeps them plain
    "musicgen_melody": {"num_codebooks": 1},  # two layers leave none to share a cache with
    "zamba": {"layers_block_type": ["linear_attention", "hybrid", "hybrid"], "num_hidden_layers": 3,
              "attention_hidden_size": 128, "attention_head_dim": 32, "mamba_dt_rank": 4},  # shared attention is tied across hybrid layers
}


# Arguments without which the architecture's default config fails its own validation.
CONFIG_ARGUMENTS = {
    "gemma4_assistant": {"text_config": {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}},
}

# Causal LMs built from one sub-config of their architecture's default config (the decoder of a composite).
SUB_CONFIGS = {"musicgen": "decoder", "musicgen_melody": "decoder"}


def _set(config, attr: str, value) -> None:
    owner, _, name = attr.rpartition(".")
    setattr(getattr(config, owner) if owner else config, name, value)


def _keep_layers(config, values: dict, old_layers: int, layers: int, per_layer: dict[int, dict]) -> list[int]:
    """Cut per-layer lists to a few layers, keeping one layer of every kind they mention.

    Hybrid models (linear + full attention, sliding + global) break when the
    first layers happen to be of one kind only, so the kept layers are the
    first of each distinct value, topped up with the earliest others.
    """
    lists = {a: v for a, v in values.items() if isinstance(v, list) and len(v) == old_layers}
    firsts: set[int] = set()
    kinds = list(lists.values()) + ([[per_layer.get(i) for i in range(old_layers)]] if per_layer else [])
    for value in kinds:
        seen: set[str] = set()
        for i, item in enumerate(value):
            if repr(item) not in seen:
                seen.add(repr(item))
                firsts.add(i)
    others = [i for i in range(old_layers) if i not in firsts]
    indices = sorted(firsts | set(others[: max(0, layers - len(firsts))]))
    for attr, value in lists.items():
        setattr(config, attr, [value[i] for i in indices])
    for attr in LAYER_COUNT_ATTRS:
        if isinstance(values.get(attr), int):
            setattr(config, attr, len(indices))
    return indices


def _take_per_layer_overrides(config) -> dict[int, dict]:
    """A heterogeneous config's per-layer overrides, removed so the config reads as homogeneous
    while it is shrunk (its per-layer attributes raise on global access otherwise)."""
    spec = config.__dict__.get("_heterogeneity_spec")
    if spec is None:
        return {}
    overrides = {int(i): dict(o) for i, o in spec.per_layer_overrides.items()}
    config.per_layer_config = None
    return overrides


def _shrink_overrides(overrides: dict, generic: dict) -> dict:
    return {a: generic[a] if a in generic and isinstance(v, int) and not isinstance(v, bool) and v else v
            for a, v in overrides.items()}


def _shrink(config, size: TinySize) -> None:
    per_layer = _take_per_layer_overrides(config)
    old_layers = next((getattr(config, a) for a in LAYER_COUNT_ATTRS if isinstance(getattr(config, a, None), int)),
                      None)
    values = config.to_dict()
    generic = _generic(size)
    for attr, value in generic.items():
        if attr in values and (values[attr] is None or isinstance(values[attr], int)) and values[attr] != 0:
            setattr(config, attr, value)
    if "qk_rope_head_dim" in values and "head_dim" in values:
        config.head_dim = generic["qk_rope_head_dim"]  # multi-head latent attention ropes head_dim dims
    if "kv_lora_rank" in values and "num_key_value_heads" in values:
        config.num_key_value_heads = size.heads  # MLA caches one key/value per head
    indices = list(range(old_layers or 0))
    if old_layers and old_layers != size.layers:
        indices = _keep_layers(config, values, old_layers, size.layers, per_layer)
    if old_layers and values.get("num_kv_shared_layers") == old_layers:  # assistants share every layer's cache
        config.num_kv_shared_layers = len(indices)
    if per_layer:  # kept layers keep their own overrides, shrunk like the globals
        config.per_layer_config = {new: _shrink_overrides(per_layer[old], generic)
                                   for new, old in enumerate(indices) if old in per_layer}
    vocab = getattr(config, "vocab_size", size.vocab) or size.vocab
    for i, attr in enumerate(TOKEN_ID_ATTRS):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value >= vocab:
            setattr(config, attr, i % 3)
        elif isinstance(value, list):
            setattr(config, attr, [v if v < vocab else i % 3 for v in value])
    for attr, value in list(values.items()):  # nested configs (text / decoder sub-configs) serialise as dicts
        if not isinstance(value, dict):
            continue
        sub = getattr(config, attr, None)
        if hasattr(sub, "to_dict") and hasattr(sub, "model_type") and sub is not config:
            _shrink(sub, size)


def tiny_config(model_type: str, size: TinySize = TinySize(), **overrides):
    """The architecture's default config, shrunk to ``size``, then ``overrides``; raises if it cannot be built."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type, **CONFIG_ARGUMENTS.get(model_type, {}))
    if model_type in SUB_CONFIGS:
        config = getattr(config, SUB_CONFIGS[model_type])
    _shrink(config, size)
    config.is_decoder = True  # BERT-style encoders in the causal-LM mapping need it
    for attr, value in {**OVERRIDES.get(model_type, {}), **overrides}.items():
        _set(config, attr, value)
    return config


def tiny_causal_lm(model_type: str = "llama", size: TinySize = TinySize(), seed: int = 0,
                   attn_implementation: str | None = None, **overrides):
    """A float32 causal LM of ``model_type`` on CPU with seeded random weights, in eval mode."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = tiny_config(model_type, size, **overrides)
    torch.manual_seed(seed)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if model_type in SUB_CONFIGS:  # the Auto mapping does not know the sub-config's type: name the class
        model_class = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
        return model_class._from_config(config, dtype=torch.float32, **kwargs).eval()
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32, **kwargs).eval()


BYTE_VOCAB = 3 + 256  # the three special tokens, then one id per byte value


def byte_tokenizer(vocab_size: int = BYTE_VOCAB, model_max_length: int = 4096):
    """The project's one file-free tokenizer: a real ``PreTrainedTokenizerFast``, one token per UTF-8 byte.

    Byte ``b`` is id ``3 + b`` after ``<pad>``, ``<s>``, ``</s>``; with a smaller
    ``vocab_size`` the bytes that do not fit (never printable ASCII below ``|``
    for 128) become ``<pad>``, the unknown token. Saved with ``save_pretrained`` it
    loads back with ``AutoTokenizer``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    as_char = bytes_to_unicode()  # byte -> the printable character byte-level tokenizers spell it with
    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS}
    vocab.update({as_char[b]: 3 + b for b in range(min(256, vocab_size - 3))})
    bytes_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    bytes_level.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        pre_tokenizers.Split("", behavior="isolated"),
    ])
    bytes_level.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=bytes_level, model_max_length=model_max_length,
        pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<pad>",
    )


def random_text_dataset(n: int, min_chars: int, max_chars: int, seed: int = 0):
    """A ``datasets.Dataset`` of random lowercase texts of varying length (for TRL)."""
    from datasets import Dataset

    gen = torch.Generator().manual_seed(seed)
    texts = []
    for _ in range(n):
        length = int(torch.randint(min_chars, max_chars, (1,), generator=gen))
        texts.append("".join(chr(97 + int(c)) for c in torch.randint(0, 26, (length,), generator=gen)))
    return Dataset.from_dict({"text": texts})


# The examples' stand-in for a Hub checkpoint: a two-layer Qwen3 with a 128-id vocabulary (see byte_tokenizer).
QWEN3_EXAMPLE = TinySize(kv_heads=4, vocab=128, positions=4096)


def tiny_qwen3(seed: int = 0, **overrides):
    """The examples' tiny Qwen3 (see :data:`QWEN3_EXAMPLE`), special tokens matching :func:`byte_tokenizer`."""
    return tiny_causal_lm("qwen3", QWEN3_EXAMPLE, seed, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                          **overrides)
