"""Per-signature compilation accounting and the persistent NEFF cache."""
import json
import logging
import multiprocessing
import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_neuronx
from torch_neuronx.accounting import use_neff_cache
from torch_neuronx.accounting.neff_cache import NeffCache


def _entries(directory):
    return sorted(p for p in directory.glob("*/*.json") if not p.name.startswith(".tmp-"))


def test_counts_equal_distinct_signatures_executed(private_neff_cache):
    a = torch.randn(3, 5, device="neuron")
    b = torch.randn(5, 7, device="neuron")
    c = torch.randn(4, 5, device="neuron")
    for _ in range(3):
        a @ b                      # one signature, three calls
    c @ b
    c @ b                          # a second mm signature
    x = torch.randn(6, 7, device="neuron")
    x.sum(dim=0)
    x.sum(dim=1)                   # a non-tensor argument changes the signature
    x.sum(dim=1)

    m = torch_neuronx.metrics()
    k = m["kernels"]
    # Structured ops run CPU's functional kernel, so they are counted by their own name.
    assert k["per_op"]["aten::mm"] == {"calls": 5, "signatures": 2, "misses": 2}
    assert k["per_op"]["aten::sum.dim_IntList"] == {"calls": 3, "signatures": 2, "misses": 2}
    assert k["calls"] == k["hits"] + k["misses"] and k["host_fallback_calls"] == 0
    assert k["unique_signatures"] == sum(op["signatures"] for op in k["per_op"].values())
    assert k["misses"] == k["unique_signatures"]  # fresh cache: every first use compiles
    assert len(_entries(private_neff_cache)) == k["misses"] == m["neff_cache"]["entries"]
    assert m["estimated_compile_seconds"] == pytest.approx(k["misses"] * m["compile_seconds_per_kernel_estimate"])
    mm_entries = [json.loads(p.read_text()) for p in _entries(private_neff_cache)]
    assert sorted(e["signature"] for e in mm_entries if e["op"] == "aten::mm") == [
        "aten::mm(Float[3, 5], Float[5, 7])",
        "aten::mm(Float[4, 5], Float[5, 7])"]
    # Results are untouched by the accounting.
    torch.testing.assert_close((a @ b).cpu(), a.cpu() @ b.cpu())


def test_reset_keeps_compiled_kernels_warm(private_neff_cache):
    w = torch.randn(9, 3, device="neuron")
    w.relu()
    torch_neuronx.reset_metrics()
    w.relu()
    k = torch_neuronx.metrics()["kernels"]
    assert (k["calls"], k["hits"], k["misses"]) == (1, 1, 0)


def test_accounting_switch_stops_counting(private_neff_cache):
    y = torch.randn(11, device="neuron")
    torch_neuronx.set_kernel_accounting(False)
    torch_neuronx.reset_metrics()
    try:
        assert not torch_neuronx.kernel_accounting_enabled()
        y.exp()
        assert torch_neuronx.metrics()["kernels"]["calls"] == 0
    finally:
        torch_neuronx.set_kernel_accounting(True)
    y.exp()
    assert torch_neuronx.metrics()["kernels"]["calls"] == 1


_JOB = textwrap.dedent("""
    import json, torch, torch_neuronx
    x = torch.randn(13, 17, device="neuron")
    for n in (1, 2, 3):
        (x[:n] @ x.T).softmax(-1).sum()
    print(json.dumps(torch_neuronx.metrics()["kernels"]))
""")


def _run_job(cache, **env):
    full = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": str(cache), **env}
    out = subprocess.run([sys.executable, "-c", _JOB], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_reuses_the_cache(tmp_path):
    cache = tmp_path / "shared"
    first = _run_job(cache)
    assert first["misses"] > 0 and first["disk_hits"] == 0
    second = _run_job(cache, TORCH_NEURONX_METRICS_DIR=str(tmp_path / "metrics"))
    assert second["misses"] == 0
    assert second["disk_hits"] == first["misses"]
    assert second["calls"] == first["calls"]
    # Exported at exit when TORCH_NEURONX_METRICS_DIR is set.
    exported = json.loads(next((tmp_path / "metrics").glob("metrics-*.json")).read_text())
    assert exported["kernels"] == second
    assert next((tmp_path / "metrics").glob("metrics-*.csv")).read_text().startswith("op,calls,")
    # Other compiler flags are other NEFFs: everything compiles again.
    flagged = _run_job(cache, NEURON_CC_FLAGS="--enable-mixed-precision-accumulation")
    assert flagged["misses"] == first["misses"]


def test_corrupt_entries_are_rewritten(private_neff_cache):
    x = torch.randn(5, 19).to("neuron")  # a copy, not a kernel: only the four below count
    (x * 2).tanh().mean().neg()
    misses = torch_neuronx.metrics()["kernels"]["misses"]
    entries = _entries(private_neff_cache)
    assert len(entries) == misses == 4
    entries[0].write_text("")                                   # empty
    entries[1].write_text(entries[1].read_text()[:10])          # truncated
    entries[2].write_bytes(b"\xff\xfe not json")                 # garbage
    entries[3].write_text(json.dumps({"format": 1, "key": "0" * 16}))  # someone else's
    use_neff_cache(private_neff_cache)                                    # a "new process"
    (x * 2).tanh().mean().neg()
    k = torch_neuronx.metrics()["kernels"]
    assert k["corrupt_entries_rewritten"] == 4
    assert (k["misses"], k["disk_hits"]) == (4, 0)
    assert all(json.loads(p.read_text())["key"] == p.stem for p in _entries(private_neff_cache))
    use_neff_cache(private_neff_cache)
    (x * 2).tanh().mean().neg()
    k = torch_neuronx.metrics()["kernels"]
    assert (k["misses"], k["disk_hits"], k["corrupt_entries_rewritten"]) == (0, 4, 0)


def test_unusable_cache_dir_degrades_to_misses(tmp_path, own_neff_cache):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("torch_neuronx").addHandler(handler)
    try:
        with own_neff_cache(blocker):
            y = torch.randn(23, device="neuron")
            y.sin(), y.cos()
            k = torch_neuronx.metrics()["kernels"]
            assert k["misses"] == 3 and k["calls"] == 3  # normal_, sin, cos
    finally:
        logging.getLogger("torch_neuronx").removeHandler(handler)
    assert [r.getMessage().split(",")[0] for r in records] == [f"NEFF cache {blocker} is not usable"]


def test_disabled_cache_counts_every_first_use(own_neff_cache):
    with own_neff_cache(None):
        torch.randn(29, device="neuron").cos()
        m = torch_neuronx.metrics()
        assert m["neff_cache"]["enabled"] is False
        assert m["kernels"]["misses"] >= 1 and m["kernels"]["disk_hits"] == 0


def _claim_all(directory, keys, seed, queue):
    random.Random(seed).shuffle(keys)
    cache = NeffCache(directory)
    queue.put([(key, cache.claim(key, {"op": "aten::mm.out"}).value) for key in keys])


def test_processes_sharing_the_cache_compile_each_signature_once(tmp_path):
    keys = [f"{i % 7:02x}{i:014x}" for i in range(120)]  # 7 shards, so processes contend
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(tmp_path, list(keys), seed, queue)) for seed in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    outcomes = [outcome for result in results for _, outcome in result]
    assert outcomes.count("miss") == len(keys) and outcomes.count("hit") == 3 * len(keys)
    assert NeffCache(tmp_path).usage()[0] == len(keys)
    assert sorted(p.stem for p in _entries(tmp_path)) == sorted(keys)


class _TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.proj = torch.nn.Linear(32, 64)

    def forward(self, ids):
        h = self.norm(self.emb(ids))
        scores = (h @ h.transpose(1, 2)).softmax(-1)
        return self.proj(scores @ h)


def _misses_for(lengths, pad_to=None):
    model = _TinyLM().to("neuron")
    torch_neuronx.reset_metrics()
    for n in lengths:
        if pad_to:
            n = -(-n // pad_to) * pad_to
        ids = torch.randint(0, 64, (2, n)).to("neuron")
        model(ids).sum().backward()
    return torch_neuronx.metrics()["kernels"]["misses"]


def test_variable_length_compiles_per_length_padding_does_not(private_neff_cache):
    lengths = [5, 17, 33, 60, 77, 99, 128, 130, 151, 190, 201, 249]  # 12 lengths, 2 padded
    use_neff_cache(private_neff_cache / "variable")
    variable = _misses_for(lengths)
    use_neff_cache(private_neff_cache / "padded")
    padded = _misses_for(lengths, pad_to=128)
    use_neff_cache(private_neff_cache / "reference")
    reference = _misses_for([128, 256])
    # Padding leaves exactly one set of kernels per padded length...
    assert padded == reference
    # ...while every new length compiles (almost) the whole model again.
    assert variable >= 4 * padded
