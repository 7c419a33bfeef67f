"""Benchmark of ``torch.compile(backend="neuron")`` (a measurement script, not a test).

  python -m benchmarks.bench_compile steady      # compiled neuron vs CPU Inductor vs eager neuron
  python -m benchmarks.bench_compile first-step  # cold vs warm persistent cache (two processes each)
  python -m benchmarks.bench_compile varlen      # compile count, lengths 60-300, unpadded vs padded
  python -m benchmarks.bench_compile lowering-cost  # cold first step with vs without the StableHLO lowering
  python -m benchmarks.bench_compile decode      # compiled decode: neuron vs CPU Inductor, one process
  python -m benchmarks.bench_compile train       # the suite's compiled training step, the same way
  python -m benchmarks.bench_compile eager-decode  # eager decode: neuron vs CPU, one process

Model: Llama, hidden 256, 4 layers, vocab 4096, batch 4 x 128 (the suite's sizes).
"""
from __future__ import annotations

import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

# Relative difference up to which the two backends' losses count as the same computation: their
# generated kernels may sum in another order; a wrong graph is off by far more.
LOSS_REL_TOL = 1e-4


def tiny_llama(device: str):
    from benchmarks.model import FULL, build_model

    return build_model(FULL).to(device)


class Trainer:
    """One configuration of the training step: device, backend (None = eager)."""

    def __init__(self, device: str, backend: str | None):
        self.model = tiny_llama(device)
        self.forward = torch.compile(self.model, backend=backend, fullgraph=True) if backend else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.ids = torch.randint(0, 4096, (4, 128), device=device)

    def step(self) -> tuple[float, float]:
        """Seconds for forward+backward, and for the whole step including the optimizer."""
        start = time.perf_counter()
        loss = self.forward(input_ids=self.ids, labels=self.ids).loss
        loss.backward()
        loss.item()
        middle = time.perf_counter()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return middle - start, time.perf_counter() - start


def steady(steps: int = 30) -> dict:
    """Steps of the three configurations interleaved, so that load from other jobs hits all alike."""
    configs = {"neuron_compiled": ("neuron", "neuron"), "cpu_inductor": ("cpu", "inductor"),
               "neuron_eager": ("neuron", None)}
    trainers = {name: Trainer(*cfg) for name, cfg in configs.items()}
    first = {name: t.step()[1] for name, t in trainers.items()}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trainers}
    for _ in range(steps):
        for name, t in trainers.items():
            times[name].append(t.step())
    out = {}
    for name, samples in times.items():
        out[name] = {"first_step_s": round(first[name], 2),
                     "median_fwd_bwd_s": statistics.median(s[0] for s in samples),
                     "median_step_s": statistics.median(s[1] for s in samples)}
    for key in ("median_fwd_bwd_s", "median_step_s"):
        out[f"compiled_neuron_over_cpu_inductor[{key}]"] = (
            out["neuron_compiled"][key] / out["cpu_inductor"][key])
        out[f"compiled_over_eager_neuron[{key}]"] = out["neuron_compiled"][key] / out["neuron_eager"][key]
    return out


def _child_first_step(lowering: str = "with_lowering") -> dict:
    import torch_neuronx

    if lowering == "without_lowering":
        from torch_neuronx.compile.lowering import lower

        lower._installed = lambda: False  # the pipeline as if torch-mlir were absent
    first = Trainer("neuron", "neuron").step()[1]
    m = torch_neuronx.get_dynamo_metrics()
    return {"first_step_s": first, "cache_hits": m["cache_hits"], "cache_misses": m["cache_misses"],
            "compile_seconds": m["compile_seconds"], "stablehlo_ops": m["stablehlo_ops"],
            "lower_seconds": sum(g["torch_neuronx_lower_us"] for g in m["compiled_graphs"]) / 1e6}


def _cold_children(labels: tuple[str, ...], args: tuple[str, ...], shared_cache: bool) -> dict:
    """One fresh process per label; with ``shared_cache`` the later ones find the first one's cache."""
    results = {}
    with tempfile.TemporaryDirectory() as root:
        for label, arg in zip(labels, args):
            cache = root if shared_cache else os.path.join(root, label)
            env = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": cache}
            env.pop("TORCHINDUCTOR_CACHE_DIR", None)
            proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_compile", "_child", arg], env=env,
                                  check=True, capture_output=True, text=True)
            results[label] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


def first_step() -> dict:
    return _cold_children(("cold", "warm"), ("with_lowering", "with_lowering"), shared_cache=True)


def lowering_cost() -> dict:
    """Cold first training step with and without the StableHLO lowering (empty caches both times)."""
    labels = ("with_lowering", "without_lowering")
    return _cold_children(labels, labels, shared_cache=False)


def varlen(samples: int = 16) -> dict:
    import torch_neuronx
    from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

    size = TinySize(kv_heads=4, vocab=512, positions=512)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(60, 301, (samples,), generator=gen).tolist()
    out = {"distinct_lengths": len(set(lengths))}
    for label, pad in (("unpadded", 1), ("padded_to_128", 128)):
        torch._dynamo.reset()
        torch_neuronx.reset_dynamo_metrics()
        model = tiny_causal_lm("llama", size).to("neuron")
        forward = torch.compile(model, backend="neuron", fullgraph=True)
        start = time.perf_counter()
        with torch.no_grad():
            for n in lengths:
                padded = -(-n // pad) * pad
                forward(input_ids=torch.randint(0, 512, (1, padded), device="neuron"))
        m = torch_neuronx.get_dynamo_metrics()
        out[label] = {"graphs_compiled": m["graphs_compiled"], "recompilations": m["recompilations"],
                      "compile_seconds": round(m["compile_seconds"], 1),
                      "wall_seconds": round(time.perf_counter() - start, 1)}
    return out


def _host_calls(run) -> dict[str, int]:
    """Calls of the generated code's allocation and view helpers while ``run()`` runs (exact counts)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.runcall(run)
    counts = {"empty_strided_cpu": 0, "reinterpret_tensor": 0}
    for (_, _, function), (_, calls, *_rest) in pstats.Stats(profile).stats.items():
        for name in counts:
            if function.endswith(f"_{name}>"):
                counts[name] += calls
    return counts


def decode(rounds: int = 16, compiled: bool = True, size=None) -> dict:
    """Static-cache greedy requests of the ``generate`` workload, CPU Inductor and neuron compiled
    in one process, interleaved request by request (alternating which goes first), so that load
    from other jobs hits both alike: per-token medians, the geometric mean of the per-round ratios
    with its 95 % interval (``stats.paired_ratio``, as the suite's rows), and the host
    buffers/reinterprets the generated code makes per request (counts: firm on a loaded machine,
    where the times are indicative). ``compiled=False``: CPU and neuron eager, each on the
    ``generate`` workload's loop and on ``generate_static``'s ``model.generate()``. One process
    leaves out the suite's process-to-process spread (per-process medians are bimodal on both
    devices), most of a fresh-process pair's interval. ``size``: the model (default ``FULL``)."""
    from transformers import StaticCache

    from benchmarks import adapters, workloads
    from benchmarks.model import FULL, build_model, decode_prompt

    torch.set_num_threads(1)
    size = size or FULL
    prompt = decode_prompt(size)
    sides = ((("inductor", adapters.CpuInductor()), ("neuron", adapters.NeuronCompiled())) if compiled
             else (("cpu", adapters.Adapter()), ("neuron", adapters.NeuronEager(accounting=True))))
    runs = {}  # (what, side) -> one request: (TTFT s, per-token s list, tokens)
    for side, adapter in sides:
        model = adapter.place(build_model(size)).eval()
        forward = torch.compile(model, backend=adapter.backend, dynamic=False) if compiled else model
        cache = StaticCache(config=model.config, max_cache_len=size.prompt + size.new_tokens)
        runs["loop", side] = lambda a=adapter, f=forward, c=cache: workloads._generate_once(a, f, c, prompt, size.new_tokens)
        if not compiled:
            runs["generate", side] = lambda a=adapter, m=model, p=prompt.to(adapter.device): \
                workloads._static_generate_once(a, m, p, size.new_tokens)[:3]
    (reference, _), (device, _) = sides
    with torch.no_grad():
        tokens = {run: [runs[run]()[2] for _ in range(2)][-1] for run in runs}  # compiles, warms
        per_token = {run: [] for run in runs}
        medians = {run: [] for run in runs}
        for r in range(rounds):
            for run in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                times = runs[run]()[1]
                per_token[run] += times
                medians[run].append(statistics.median(times))
        calls = {side: _host_calls(runs["loop", side]) for side, _ in sides} if compiled else None
    result = {what: _one_process_row(medians[what, device], medians[what, reference], device, reference,
                                     same_tokens=tokens[what, device] == tokens[what, reference],
                                     per_token_ms={side: statistics.median(per_token[what, side]) * 1e3
                                                   for side, _ in sides})
              for what in dict.fromkeys(what for what, _ in runs)}
    return result | ({"host_calls_per_request": calls} if compiled else {})


def _one_process_row(subject: list[float], reference: list[float], device: str, reference_name: str,
                     **details) -> dict:
    """One path measured with both sides in one process: ``details`` (whether both computed the
    same thing, ``same_*``; both sides' medians, ``*_ms``) and the geometric mean of the rounds'
    ratios with its 95 % interval (``stats.paired_ratio``, as the suite's rows)."""
    from benchmarks.stats import paired_ratio

    ratio = paired_ratio([n / c for n, c in zip(subject, reference, strict=True)])
    return details | {f"{device}_over_{reference_name}": [ratio.geometric_mean, ratio.low, ratio.high]}


def train(rounds: int = 16, size=None) -> dict:
    """The suite's compiled training step (``workloads._Trainer``: batch to the device, AdamW step,
    loss read back), CPU Inductor and neuron compiled in one process, one step each per round,
    alternating which goes first, on the same batches: both sides' median step, the geometric
    mean of the rounds' ratios with its interval, and whether the two models' losses agreed
    (same seeded weights, same batches: a side computing something else would show there).
    ``size``: the model (default ``FULL``)."""
    from benchmarks import adapters, workloads
    from benchmarks.model import FULL, token_batch

    torch.set_num_threads(1)
    size = size or FULL
    sides = {"inductor": workloads._Trainer(adapters.CpuInductor(), size),
             "neuron": workloads._Trainer(adapters.NeuronCompiled(), size)}
    seconds = {side: [] for side in sides}
    losses = {side: [] for side in sides}
    for step in range(2 + rounds):  # two warm-up steps: the first compiles, the second settles
        batch = token_batch(size, size.seq, step)
        for side in (list(sides) if step % 2 == 0 else list(reversed(sides))):
            spent, loss = sides[side].step(batch)
            losses[side].append(loss)
            if step >= 2:
                seconds[side].append(spent)
    same = all(math.isclose(n, c, rel_tol=LOSS_REL_TOL) for n, c in zip(losses["neuron"], losses["inductor"]))
    return {"train": _one_process_row(seconds["neuron"], seconds["inductor"], "neuron", "inductor", same_loss=same,
                                      step_ms={side: statistics.median(s) * 1e3 for side, s in seconds.items()})}


if __name__ == "__main__":
    what = sys.argv[1]
    torch._dynamo.config.recompile_limit = 1000
    torch._dynamo.config.accumulated_recompile_limit = 10000
    if what == "_child":
        print(json.dumps(_child_first_step(*sys.argv[2:])))
    else:
        modes = {"steady": steady, "first-step": first_step, "lowering-cost": lowering_cost, "varlen": varlen,
                 "decode": decode, "eager-decode": functools.partial(decode, compiled=False), "train": train}
        print(json.dumps(modes[what](), indent=2))
