"""The examples in examples/, run at tiny size so they cannot silently rot.

(examples/diffusion_tp.py is exercised in test_diffusers.py.)
"""
from __future__ import annotations

import ast
import re

import pytest
import torch

import children
from torch_neuronx.testing import tiny_models
from hf_models import run_example


STATIC_CACHE = {"batch": 2, "prompt_len": 16, "new": 8}


def _static_cache_example(environ: dict[str, str]) -> str:
    return run_example("inference_static_cache.py", "--batch", str(STATIC_CACHE["batch"]),
                       "--prompt-len", str(STATIC_CACHE["prompt_len"]), "--max-seq-len", "32",
                       "--max-new-tokens", str(STATIC_CACHE["new"]), "--runs", "2", environ=environ)


# The static-cache example compiles in its own process, needing nothing from the tests before it.
static_cache_stdout = children.lane_fixture("static_cache_stdout", _static_cache_example)


@pytest.mark.slow
def test_inference_static_cache_example(static_cache_stdout):
    """Compiled static-cache generation: the first run compiles, the second reuses
    every graph (no recompiles), and the tokens equal eager greedy decoding on CPU."""
    batch, prompt_len, new = STATIC_CACHE["batch"], STATIC_CACHE["prompt_len"], STATIC_CACHE["new"]
    stdout = static_cache_stdout
    for metric in ("first-token", "per-token", "tokens/s"):
        assert stdout.count(metric) == 2, stdout
    # each run's request projected on Trainium, labelled; warm decode is one graph per token
    projected = [float(ms) for ms in re.findall(r"projected on one NeuronCore: request ([0-9.]+) ms", stdout)]
    assert len(projected) == 2 and all(ms > 0 for ms in projected) and stdout.count("(projected)") == 2, stdout
    compiled = [int(n) for n in re.findall(r"compiled graphs \+(\d+)", stdout)]
    recompiles = [int(n) for n in re.findall(r"recompiles \+(\d+)", stdout)]
    assert compiled[0] >= 1 and compiled[1] == 0 and recompiles[1] == 0, stdout
    tokens = ast.literal_eval(stdout.split("tokens:")[1].strip().splitlines()[0])

    model = tiny_models.tiny_qwen3(num_hidden_layers=1).eval()
    prompt = torch.randint(3, model.config.vocab_size, (batch, prompt_len),
                           generator=torch.Generator().manual_seed(0))
    reference = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    assert tokens == reference[0, prompt_len:].tolist()


def test_inference_example_rejects_a_cache_too_short(capsys):
    """The script's own main() (its arguments are checked before anything runs): a fresh
    interpreter would spend seconds importing torch to reach the same parser."""
    from inference_static_cache import main

    with pytest.raises(SystemExit) as exited:
        main(["--prompt-len", "30", "--max-new-tokens", "10", "--max-seq-len", "32"])
    assert exited.value.code == 2 and "must fit in --max-seq-len" in capsys.readouterr().err


@pytest.mark.exhaustive  # the example end to end under torchrun (20-35 s): make test-exhaustive
def test_sft_tp_fsdp_example(tmp_path):
    """2 x 2 = 4 ranks: the model is loaded TP x FSDP sharded, trained without
    re-sharding, packed to 2048 and padded to multiples of 128 (4 x 8 at full size)."""
    stdout = run_example("sft_tp_fsdp.py", "--tp", "2", "--fsdp", "2", "--max-steps", "2",
                         "--output-dir", str(tmp_path), nproc=4, timeout=400)
    assert "ranks 4: tp=2 x fsdp=2; device neuron:0" in stdout, stdout
    assert "pad_to_multiple_of=128" in stdout
    shapes = ast.literal_eval(stdout.split("batch shapes")[1].strip().splitlines()[0])
    assert len(shapes) == 2 and all(rows == 1 and length % 128 == 0 and length <= 2048 for rows, length in shapes)
    losses = ast.literal_eval(stdout.split("losses")[1].strip().splitlines()[0])
    assert len(losses) == 2 and all(0 < loss < 20 for loss in losses)
