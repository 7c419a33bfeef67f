"""Tiny stand-ins for Hub checkpoints, built offline from config classes.

The examples default to these so they run in seconds on emulated cores; pass
``--model`` to an example to use a real checkpoint instead.
"""
from __future__ import annotations

import torch

PAD, BOS, EOS = 0, 1, 2


def char_tokenizer(vocab_size: int = 128, model_max_length: int = 4096):
    """A real ``PreTrainedTokenizerFast``: one token per printable character."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS}
    vocab.update({chr(32 + i): 3 + i for i in range(min(95, vocab_size - 3))})
    word_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    word_level.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=word_level, model_max_length=model_max_length,
        pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<pad>",
    )


def tiny_qwen3(seed: int = 0, **overrides):
    """A two-layer Qwen3 causal LM (hidden 64, 4 heads) on CPU."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, head_dim=16, max_position_embeddings=4096,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
    )
    kwargs.update(overrides)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3", **kwargs))


def random_text_dataset(n: int, min_chars: int, max_chars: int, seed: int = 0):
    """A ``datasets.Dataset`` of random lowercase texts of varying length (for TRL)."""
    from datasets import Dataset

    gen = torch.Generator().manual_seed(seed)
    texts = []
    for _ in range(n):
        length = int(torch.randint(min_chars, max_chars, (1,), generator=gen))
        texts.append("".join(chr(97 + int(c)) for c in torch.randint(0, 26, (length,), generator=gen)))
    return Dataset.from_dict({"text": texts})
