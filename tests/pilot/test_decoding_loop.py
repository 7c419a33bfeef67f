"""The one decode loop and host peak-RSS reading (``torch_neuronx/testing/decoding.py``) that the
pilot's performance step and the benchmarks' workloads share: greedy tokens against
Transformers' own ``generate`` on CPU, the same tokens through both callers, a real peak."""
from __future__ import annotations

import pytest
import torch

from torch_neuronx.pilot import perf
from torch_neuronx.testing.decoding import greedy_decode, host_peak_rss_bytes, reset_host_peak_rss

transformers = pytest.importorskip("transformers")

NEW = 5


@pytest.fixture(scope="module")
def tiny():
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=97, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (2, 7))
    with torch.no_grad():
        reference = model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                   pad_token_id=0)[:, prompt.shape[1]:]
    return model, prompt, reference


def _cache(model, prompt):
    return {"cache": transformers.StaticCache(config=model.config, max_cache_len=prompt.shape[1] + NEW)}


@pytest.mark.parametrize("positions", [True, False])
def test_greedy_decode_matches_generate(tiny, positions):
    model, prompt, reference = tiny
    windows = []
    run = greedy_decode(model, prompt, NEW, _cache(model, prompt), "cpu", lambda: None, positions=positions,
                        after_token=lambda: windows.append(1))
    assert torch.equal(run.tokens, reference)
    assert run.ttft_seconds > 0 and len(run.per_token_seconds) == NEW - 1 and all(t > 0 for t in run.per_token_seconds)
    assert len(windows) == NEW  # the prefill and each decode step, each read outside its timed region


def test_pilot_and_benchmark_decode_the_same_tokens(tiny):
    from benchmarks.workloads import _generate_once

    model, prompt, reference = tiny

    class CpuAdapter:
        device = torch.device("cpu")

        @staticmethod
        def sync():
            pass

    ttft, per_token, tokens, projected = perf.decode_once(model, prompt, NEW, lambda: None)
    assert tokens == reference.tolist() and len(per_token) == NEW - 1 and projected == []
    cache = _cache(model, prompt[:1])["cache"]
    for _ in range(2):  # the cache is reset between requests
        ttft, per_token, bench_tokens = _generate_once(CpuAdapter, model, cache, prompt[:1], NEW)
        assert bench_tokens == reference[0].tolist() and len(per_token) == NEW - 1


def test_host_peak_rss_sees_an_allocation_after_a_reset():
    reset_host_peak_rss()
    before = host_peak_rss_bytes()
    block = torch.ones(64 * 2**20, dtype=torch.uint8)  # 64 MiB, touched
    assert host_peak_rss_bytes() - before >= 60 * 2**20
    del block
    reset_host_peak_rss()
    assert host_peak_rss_bytes() < before + 60 * 2**20  # the peak restarts at the current RSS
    assert perf.peak_memory(torch.device("cpu"))["peak_bytes"] == pytest.approx(host_peak_rss_bytes(), rel=0.05)
