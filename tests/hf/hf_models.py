"""Tiny Hugging Face models built from config classes, shared by the tests/hf suite (a module of
its own, not ``conftest``: ``from conftest import`` meets whichever conftest was imported first,
and ``pytest tests/hf tests/distributed`` then failed to collect).

Everything is offline and small (hidden 32, two layers, vocabulary 128) so a
whole family sweep costs seconds; the reference for every neuron result is the
same computation on CPU.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import torch

from torch_neuronx.testing import tiny_models

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

VOCAB = 128
PAD, BOS, EOS = tiny_models.PAD, tiny_models.BOS, tiny_models.EOS
SIZE = tiny_models.TinySize(hidden=32, intermediate=64, vocab=VOCAB)

# One entry per widely used causal-LM family; torch_neuronx.testing.tiny_models shrinks each.
FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma", "phi3", "gpt2", "gpt_neox")


def tiny_causal_lm(family: str = "llama", attn: str = "sdpa", seed: int = 0, **overrides):
    """A freshly initialised tiny ``AutoModelForCausalLM`` on CPU, in eval mode."""
    return tiny_models.tiny_causal_lm(family, SIZE, seed, attn, pad_token_id=PAD, bos_token_id=BOS,
                                      eos_token_id=EOS, **overrides)


def cpu_and_neuron(model):
    """The CPU model and an identical copy moved to ``neuron``."""
    return model, copy.deepcopy(model).to("neuron")


def token_batch(batch: int = 2, length: int = 10, seed: int = 0) -> torch.Tensor:
    """Token ids that avoid the special tokens, so no padding warnings fire."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=gen)


def text_dataset(n: int = 16, seed: int = 0):
    """Short random texts (5-40 characters) for TRL."""
    return tiny_models.random_text_dataset(n, 5, 40, seed)


def run_example(script: str, *args: str, timeout: float = 240, nproc: int | None = None, env=None, environ=None):
    """Run ``examples/<script>`` (optionally under torchrun) and return its stdout; ``environ``
    (default ``os.environ``) is the environment ``env`` adds to."""
    import subprocess

    full_env = {**(os.environ if environ is None else environ), "PYTHONUNBUFFERED": "1", **(env or {})}
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
