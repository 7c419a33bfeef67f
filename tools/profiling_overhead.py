"""What profiling the device costs: a training step under ``torch.profiler``, CPU only vs CPU + device.

``python -m tools.profiling_overhead`` runs one eager tiny-Llama AdamW step on ``neuron`` per
measurement, in one process, warm: unprofiled, profiled with ``ProfilerActivity.CPU`` (what a
user profiling the host pays), and profiled with ``CPU`` + ``PrivateUse1`` and the default
``NeuronConfig`` (the device timeline added). Each profiled measurement includes what a user
reads: ``key_averages()`` and ``export_chrome_trace()``. The two profiled kinds alternate in
ABBA order, and each pair's ratio (device / CPU) is summarised as ``benchmarks.stats`` does:
geometric mean and 95 % interval. Every figure is a host measurement on this machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.coverage.probe import token_batch
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

from benchmarks.stats import paired_ratio

ACTIVITIES = {"cpu": [ProfilerActivity.CPU], "device": [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]}


def _step_factory(layers: int):
    model = tiny_causal_lm("llama", TinySize(layers=layers)).train().to("neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = token_batch(model).to("neuron")

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return step


def _profiled(step, kind: str, folder: str) -> tuple[float, float, int]:
    """Wall and process CPU seconds of one profiled step with what a user reads after it,
    and the trace's events."""
    start, cpu = time.perf_counter(), time.process_time()
    with profile(activities=ACTIVITIES[kind]) as prof:
        step()
    prof.key_averages()
    path = os.path.join(folder, f"{kind}.json")
    prof.export_chrome_trace(path)
    return time.perf_counter() - start, time.process_time() - cpu, len(prof.events())


def measure(pairs: int = 10, layers: int = 2) -> dict:
    step = _step_factory(layers)
    for _ in range(2):
        step()
    with tempfile.TemporaryDirectory(prefix="torchneuron-bench-profiling-") as folder:
        for kind in ACTIVITIES:  # warm both profilers (first use initialises Kineto)
            _profiled(step, kind, folder)
        seconds: dict[str, list[tuple[float, float]]] = {"none": [], "cpu": [], "device": []}
        events: dict[str, int] = {}
        for i in range(pairs):
            order = ("cpu", "device") if i % 2 == 0 else ("device", "cpu")
            for kind in order:
                wall, cpu, events[kind] = _profiled(step, kind, folder)
                seconds[kind].append((wall, cpu))
            start, cpu = time.perf_counter(), time.process_time()
            step()
            seconds["none"].append((time.perf_counter() - start, time.process_time() - cpu))
    ratios = [paired_ratio([d[i] / c[i] for d, c in zip(seconds["device"], seconds["cpu"])]) for i in (0, 1)]
    return {"pairs": pairs, "layers": layers, "seconds": seconds, "events": events, "wall": ratios[0],
            "cpu": ratios[1]}


def _ratio(r) -> str:
    interval = f"{r.low:.2f}–{r.high:.2f}" if r.low is not None else "n/a"
    return f"**{r.geometric_mean:.2f}×** (95 % interval {interval}, {r.pairs} pairs)"


def markdown(result: dict) -> str:
    def median(kind: str, i: int) -> float:
        values = sorted(v[i] for v in result["seconds"][kind])
        return values[len(values) // 2] * 1e3

    rows = [("not profiled", "none", ""), ("`ProfilerActivity.CPU`", "cpu", result["events"]["cpu"]),
            ("`CPU` + `PrivateUse1` (device timeline)", "device", result["events"]["device"])]
    return "\n".join([
        f"Tiny Llama ({result['layers']} layers) AdamW step on `neuron`, eager, {result['pairs']} ABBA pairs "
        "(host measurements, medians; profiled rows include `key_averages()` and `export_chrome_trace()`):",
        "",
        "| run | wall ms | process CPU ms | events |",
        "|---|---|---|---|",
        *(f"| {label} | {median(kind, 0):.1f} | {median(kind, 1):.1f} | {n} |" for label, kind, n in rows),
        "",
        f"CPU + device over CPU only: wall {_ratio(result['wall'])}, process CPU {_ratio(result['cpu'])}.",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="ABBA pairs of profiled steps")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers of the tiny Llama")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(markdown(measure(args.pairs, args.layers)))


if __name__ == "__main__":
    main(sys.argv[1:])
