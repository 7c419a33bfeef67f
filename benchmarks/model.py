"""The benchmark's model and inputs, identical for every backend.

Kept free of backend code so the same file runs under the project's venv and
under the separate PyTorch/XLA venv (older torch): only ``torch`` and
``transformers`` are imported, and only inside functions.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Size:
    """Every knob that changes the amount of work; one instance per suite size."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    batch: int
    seq: int
    train_steps: int  # steady-state steps measured after the first step
    varlen_steps: int
    varlen_min: int
    varlen_max: int
    pad_multiple: int
    prompt: int
    new_tokens: int
    # Measured warm requests of ``generate`` per process, tokens pooled: the per-token median of
    # one 31-token request moved ±25 % within a process on a loaded machine, most of a pair's spread.
    decode_requests: int
    # Rounds of ``decode_in_process`` (each: one request per device and decode path), so that a
    # full-size process takes 15-25 s and a suite round many such processes.
    decode_rounds: int
    op_iters: int
    op_repeats: int

    def as_dict(self) -> dict:
        return asdict(self)


FULL = Size(
    hidden=256, layers=4, heads=4, intermediate=688, vocab=4096,
    batch=4, seq=128, train_steps=10,
    varlen_steps=20, varlen_min=60, varlen_max=300, pad_multiple=128,
    prompt=64, new_tokens=32, decode_requests=5, decode_rounds=24, op_iters=2000, op_repeats=5,
)

# Small enough that every eager backend runs all workloads in a few seconds.
SMOKE = Size(
    hidden=32, layers=1, heads=2, intermediate=64, vocab=128,
    batch=2, seq=16, train_steps=2,
    varlen_steps=3, varlen_min=5, varlen_max=20, pad_multiple=16,
    prompt=8, new_tokens=4, decode_requests=2, decode_rounds=2, op_iters=20, op_repeats=2,
)

SIZES = {"full": FULL, "smoke": SMOKE}
SEED = 1234


def build_model(size: Size):
    """A randomly initialised Llama, seeded so every backend starts from the same weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        intermediate_size=size.intermediate,
        vocab_size=size.vocab,
        max_position_embeddings=max(size.varlen_max, size.seq, size.prompt + size.new_tokens) * 2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(SEED)
    return LlamaForCausalLM(config)


def token_batch(size: Size, seq: int, step: int):
    """A deterministic (batch, seq) batch of token ids for training step ``step``."""
    import torch

    gen = torch.Generator().manual_seed(SEED + step)
    return torch.randint(3, size.vocab, (size.batch, seq), generator=gen)


def decode_prompt(size: Size):
    """The one-sequence prompt of every timed decode request (seeded, on CPU)."""
    return token_batch(size, size.prompt, 10_000)[:1]


def eager_decoder(size: Size, device: str):
    """The suite's model on ``device`` for uncompiled static-cache decoding, with its prompt there
    (``disable_compile``: Transformers would otherwise compile a static-cache decode itself)."""
    model = build_model(size).to(device).eval()
    model.generation_config.disable_compile = True
    return model, decode_prompt(size).to(device)


def static_greedy(new_tokens: int) -> dict:
    """``generate()`` settings of every static-cache request the benchmarks time: greedy, exactly
    ``new_tokens`` new tokens (no early stop at an end-of-sequence token)."""
    return dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                cache_implementation="static", pad_token_id=0)


def varlen_lengths(size: Size) -> list[int]:
    """The fixed, seeded list of sequence lengths for the variable-length workload."""
    rng = random.Random(SEED)
    return [rng.randint(size.varlen_min, size.varlen_max) for _ in range(size.varlen_steps)]


def padded_length(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple
