"""Where a static-cache decode spends its time, op by op: ``neuron`` eager next to CPU eager.

  python -m benchmarks.decode_ops                 # the suite's model, 32 new tokens, 3 rounds
  python -m benchmarks.decode_ops --smoke         # tiny sizes
  python -m benchmarks.decode_ops --markdown F    # also write the table to F

A measurement, not a test. One process holds the same seeded model on both
devices and alternates ``generate(cache_implementation="static")`` calls under
``torch.profiler`` (rounds interleaved, so load from other jobs hits both
alike). Per ATen op: calls per generated token and self time per call on each
device (host wall clock; the profiler's own cost is in both columns), and what
the difference adds per token. On ``neuron`` an op's self time includes the
CPU kernel it runs plus the device path around it (argument aliasing, kernel
accounting, allocation); time outside ATen ops (Python, Transformers) is the
"outside ops" row.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.model import SIZES, build_model, token_batch


def _round(model, prompt, settings) -> tuple[dict[str, tuple[int, float]], float]:
    """One profiled ``generate()``: per op (calls, self µs), and the call's wall time in µs."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        model.generate(prompt, **settings)
        wall = (time.perf_counter() - start) * 1e6
    return {e.key: (e.count, e.self_cpu_time_total) for e in prof.key_averages()}, wall


def measure(size_name: str = "full", rounds: int = 3) -> dict:
    size = SIZES[size_name]
    import torch_neuronx  # noqa: F401  (registers the device)

    models, prompts = {}, {}
    for device in ("cpu", "neuron"):
        models[device] = build_model(size).to(device).eval()
        models[device].generation_config.disable_compile = True
        prompts[device] = token_batch(size, size.prompt, 10_000)[:1].to(device)
    settings = dict(max_new_tokens=size.new_tokens, min_new_tokens=size.new_tokens, do_sample=False,
                    cache_implementation="static", pad_token_id=0)
    totals = {d: {} for d in models}
    wall = {d: 0.0 for d in models}
    with torch.no_grad():
        for device in models:  # warm-up: the static cache, the device's kernel signatures
            models[device].generate(prompts[device], **settings)
        for _ in range(rounds):
            for device in models:
                ops, us = _round(models[device], prompts[device], settings)
                wall[device] += us
                for name, (count, self_us) in ops.items():
                    calls, total = totals[device].get(name, (0, 0.0))
                    totals[device][name] = (calls + count, total + self_us)
    tokens = rounds * size.new_tokens
    rows = []
    for name in sorted(set(totals["cpu"]) | set(totals["neuron"])):
        cpu_calls, cpu_us = totals["cpu"].get(name, (0, 0.0))
        dev_calls, dev_us = totals["neuron"].get(name, (0, 0.0))
        rows.append({
            "op": name,
            "cpu_calls_per_token": cpu_calls / tokens,
            "neuron_calls_per_token": dev_calls / tokens,
            "cpu_us_per_call": cpu_us / cpu_calls if cpu_calls else None,
            "neuron_us_per_call": dev_us / dev_calls if dev_calls else None,
            "added_us_per_token": (dev_us - cpu_us) / tokens,
        })
    rows.sort(key=lambda r: -abs(r["added_us_per_token"]))
    in_ops = {d: sum(t for _, t in totals[d].values()) for d in totals}
    return {
        "size": size_name, "rounds": rounds, "tokens": tokens, "rows": rows,
        "us_per_token": {d: wall[d] / tokens for d in wall},
        "outside_ops_us_per_token": {d: (wall[d] - in_ops[d]) / tokens for d in wall},
    }


def markdown(result: dict, limit: int = 25) -> str:
    def cell(v):
        return "–" if v is None else f"{v:.2f}"

    per_token = result["us_per_token"]
    outside = result["outside_ops_us_per_token"]
    lines = [
        f"Static-cache `generate()` per generated token (host wall clock, profiler on): CPU "
        f"{per_token['cpu']:.0f} µs, neuron {per_token['neuron']:.0f} µs "
        f"({per_token['neuron'] / per_token['cpu']:.2f}×); {result['rounds']} interleaved rounds.",
        "",
        "| op | calls / token | CPU µs / call | neuron µs / call | ratio | neuron adds µs / token |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"][:limit]:
        ratio = (r["neuron_us_per_call"] / r["cpu_us_per_call"]
                 if r["cpu_us_per_call"] and r["neuron_us_per_call"] else None)
        calls = max(r["cpu_calls_per_token"], r["neuron_calls_per_token"])
        lines.append(f"| `{r['op']}` | {calls:.1f} | {cell(r['cpu_us_per_call'])} | "
                     f"{cell(r['neuron_us_per_call'])} | {cell(ratio)} | {r['added_us_per_token']:+.1f} |")
    lines.append(f"| outside ATen ops (Python, Transformers) | – | – | – | – | "
                 f"{outside['neuron'] - outside['cpu']:+.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--rounds", type=int, default=3, help="profiled generate() calls per device")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    text = markdown(measure("smoke" if args.smoke else "full", args.rounds))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
