"""Tiny Hugging Face models built from config classes, shared by the tests/hf suite.

Everything is offline and small (hidden 32, two layers, vocabulary 128) so a
whole family sweep costs seconds; the reference for every neuron result is the
same computation on CPU.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))

import tiny_models  # noqa: E402  (examples/tiny_models.py: shared with the examples)

VOCAB = 128
PAD, BOS, EOS = tiny_models.PAD, tiny_models.BOS, tiny_models.EOS

# One entry per architecture family of the brief: the config overrides that make
# it tiny. Families whose config uses GPT-2 style names get their own keys.
_LLAMA_LIKE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
FAMILIES: dict[str, dict] = {
    "llama": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": {**_LLAMA_LIKE, "head_dim": 8},
    "mistral": _LLAMA_LIKE,
    "gemma": {**_LLAMA_LIKE, "head_dim": 8},
    "phi3": _LLAMA_LIKE,
    "gpt2": dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=256),
    "gpt_neox": {**_LLAMA_LIKE, "num_key_value_heads": None},
}


def tiny_config(family: str, **overrides):
    """The tiny ``PretrainedConfig`` of ``family`` (see ``FAMILIES``)."""
    from transformers import AutoConfig

    kwargs = {k: v for k, v in FAMILIES[family].items() if v is not None}
    kwargs.update(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    kwargs.update(overrides)
    return AutoConfig.for_model(family, **kwargs)


def tiny_causal_lm(family: str = "llama", attn: str = "sdpa", seed: int = 0, **overrides):
    """A freshly initialised tiny ``AutoModelForCausalLM`` on CPU, in eval mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, **overrides), attn_implementation=attn)
    return model.eval()


def cpu_and_neuron(model):
    """The CPU model and an identical copy moved to ``neuron``."""
    return model, copy.deepcopy(model).to("neuron")


def token_batch(batch: int = 2, length: int = 10, seed: int = 0) -> torch.Tensor:
    """Token ids that avoid the special tokens, so no padding warnings fire."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=gen)


@pytest.fixture(scope="session")
def char_tokenizer():
    return tiny_models.char_tokenizer(VOCAB)


def text_dataset(n: int = 16, seed: int = 0):
    """Short random texts (5-40 characters) for TRL."""
    return tiny_models.random_text_dataset(n, 5, 40, seed)


def run_example(script: str, *args: str, timeout: float = 240, nproc: int | None = None, env=None):
    """Run ``examples/<script>`` (optionally under torchrun) and return its stdout."""
    import subprocess

    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    else:
        cmd = [sys.executable]
    proc = subprocess.run(
        [*cmd, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, f"{script} failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout
