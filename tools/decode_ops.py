"""Where a static-cache decode spends its time, op by op: ``neuron`` eager next to CPU eager.

  python -m tools.decode_ops                 # the suite's model, 32 new tokens, 3 rounds
  python -m tools.decode_ops --smoke         # tiny sizes
  python -m tools.decode_ops --markdown F    # also write the table to F
  python -m tools.decode_ops --replay        # each call of the decode by itself, in a hot loop

A measurement, not a test. One process holds the same seeded model on both
devices and alternates ``generate(cache_implementation="static")`` calls under
``torch.profiler`` (rounds interleaved, so load from other jobs hits both
alike). Per ATen op: calls per generated token and self time per call on each
device (host wall clock; the profiler's own cost is in both columns), and what
the difference adds per token. On ``neuron`` an op's self time includes the
CPU kernel it runs plus the device path around it (argument aliasing, kernel
accounting, allocation); time outside ATen ops (Python, Transformers) is the
"outside ops" row.

``--replay`` separates the device path's own work from its footprint. Every distinct ATen call
of the decode (op, argument layouts and values, recorded on CPU) is replayed by itself in a loop
on each device, so the path's code and data stay in cache: what remains is the work it does per
call. Next to the ratio of a real decode, where ops alternate and each one's code is cold, the
difference is what the path's footprint costs. Each replayed call's first result is also
compared across the devices.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from benchmarks.model import SIZES, eager_decoder, static_greedy


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
        models[device], prompts[device] = eager_decoder(size, device)
    settings = static_greedy(size.new_tokens)
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


class _Snapshot:
    """An argument tensor as the call first saw it: its whole storage's values and its layout."""

    def __init__(self, t: torch.Tensor):
        self.flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage()).clone()
        self.layout = (t.shape, t.stride(), t.storage_offset())

    def on(self, device: str) -> torch.Tensor:
        return self.flat.to(device).as_strided(*self.layout)


class _Recorder(TorchDispatchMode):
    """Every distinct ATen call (op, argument layouts and scalars) and how often it ran; the
    arguments of its first occurrence, copied before the op could write them."""

    def __init__(self):
        super().__init__()
        self.calls: dict[tuple, list] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        layout = repr(tree_map(lambda a: (a.shape, a.stride(), a.storage_offset(), a.dtype)
                               if isinstance(a, torch.Tensor) else a, (args, kwargs)))
        entry = self.calls.get((func, layout))
        if entry is None:
            self.calls[func, layout] = [1, func, tree_map(
                lambda a: _Snapshot(a) if isinstance(a, torch.Tensor) else a, (args, kwargs))]
        else:
            entry[0] += 1
        return func(*args, **kwargs)


def _arguments(snapshot, device: str):
    """A recorded call's arguments on ``device`` (a ``device=`` argument follows)."""
    def place(a):
        if isinstance(a, _Snapshot):
            return a.on(device)
        if isinstance(a, torch.device):
            return torch.device(device)
        return a
    return tree_map(place, snapshot, is_leaf=lambda a: isinstance(a, _Snapshot))


# Ops whose results are not defined values (fresh, uninitialised memory; no ATen tag says so):
# timed, not compared.
_UNDEFINED_RESULTS = frozenset({
    "aten.empty.memory_format", "aten.empty_strided.default", "aten.empty_like.default",
    "aten.new_empty.default", "aten.new_empty_strided.default", "aten.resize_.default",
})


def _same_result(func, cpu_args, neuron_args) -> bool:
    """The call's first result on each device, from fresh copies of its arguments, agrees."""
    expected, got = func(*cpu_args[0], **cpu_args[1]), func(*neuron_args[0], **neuron_args[1])
    if str(func) in _UNDEFINED_RESULTS:
        return True
    try:
        torch.testing.assert_close(tree_map(lambda a: a.cpu() if isinstance(a, torch.Tensor) else a, got),
                                   expected, equal_nan=True)
    except AssertionError:
        return False
    return True


def _time_call(func, args: dict, loops: int, rounds: int = 9) -> tuple[float, float]:
    """ns per call on CPU, and what neuron adds to it: ``loops`` calls in a row per device, the
    two back to back in each round (alternating which goes first); medians over the rounds of
    CPU's time and of the per-round difference, which load shifts less than either time."""
    for device_args, kwargs in args.values():  # warm-up
        for _ in range(max(1, loops // 10)):
            func(*device_args, **kwargs)
    cpu, added = [], []
    for r in range(rounds):
        ns = {}
        for device in (("cpu", "neuron") if r % 2 == 0 else ("neuron", "cpu")):
            device_args, kwargs = args[device]
            start = time.perf_counter_ns()
            for _ in range(loops):
                func(*device_args, **kwargs)
            ns[device] = (time.perf_counter_ns() - start) / loops
        cpu.append(ns["cpu"])
        added.append(ns["neuron"] - ns["cpu"])
    return statistics.median(cpu), statistics.median(added)


def replay(size_name: str = "full", loops: int = 200) -> dict:
    """Each distinct call of a static-cache ``generate()`` replayed by itself on CPU and neuron
    (see the module's docstring): per op, calls per token and ns per call on each device, and the
    whole decode's total as the sum over its calls."""
    size = SIZES[size_name]
    import torch_neuronx  # noqa: F401  (registers the device)

    model, prompt = eager_decoder(size, "cpu")
    recorder = _Recorder()
    with torch.no_grad():
        model.generate(prompt, **static_greedy(size.new_tokens))  # warm-up: the static cache's first allocation
        with recorder:
            model.generate(prompt, **static_greedy(size.new_tokens))
    per_op: dict[str, dict] = {}
    differing, failed = [], {}
    with torch.no_grad():
        for count, func, snapshot in recorder.calls.values():
            name = str(func)
            try:
                if not _same_result(func, _arguments(snapshot, "cpu"), _arguments(snapshot, "neuron")):
                    differing.append(name)
                cpu_ns, added_ns = _time_call(func, {d: _arguments(snapshot, d) for d in ("cpu", "neuron")}, loops)
            except Exception as error:  # a call that cannot run by itself: reported, not timed
                failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
                continue
            row = per_op.setdefault(name, {"op": name, "calls_per_token": 0.0, "cpu_ns": 0.0, "added_ns": 0.0})
            per_token = count / size.new_tokens
            row["calls_per_token"] += per_token
            row["cpu_ns"] += per_token * cpu_ns
            row["added_ns"] += per_token * added_ns
    rows = sorted(per_op.values(), key=lambda r: -r["added_ns"])
    return {"size": size_name, "loops": loops, "rows": rows,
            "ns_per_token": {"cpu": sum(r["cpu_ns"] for r in rows), "added": sum(r["added_ns"] for r in rows)},
            "differing": differing, "failed": failed}


def markdown_replay(result: dict, limit: int = 25) -> str:
    total = result["ns_per_token"]
    lines = [
        f"Each call of a static-cache `generate()` replayed by itself ({result['loops']} in a row, "
        f"host wall clock), summed per generated token: CPU {total['cpu'] / 1e3:.0f} µs, neuron adds "
        f"{total['added'] / 1e3:+.1f} µs ({(total['cpu'] + total['added']) / total['cpu']:.3f}×).",
        "",
        "| op | calls / token | CPU ns / call | neuron adds ns / call | ratio | neuron adds µs / token |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"][:limit]:
        calls = r["calls_per_token"]
        lines.append(f"| `{r['op']}` | {calls:.1f} | {r['cpu_ns'] / calls:.0f} | {r['added_ns'] / calls:+.0f} | "
                     f"{(r['cpu_ns'] + r['added_ns']) / r['cpu_ns']:.2f} | {r['added_ns'] / 1e3:+.2f} |")
    if result["differing"]:
        lines.append(f"\nResults differ between the devices: {', '.join(result['differing'])}")
    for name, why in result["failed"].items():
        lines.append(f"\nNot replayed: `{name}` ({why})")
    return "\n".join(lines)


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
    parser.add_argument("--replay", action="store_true",
                        help="each call of the decode by itself, in a hot loop (the path's work without its footprint)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    size = "smoke" if args.smoke else "full"
    text = markdown_replay(replay(size)) if args.replay else markdown(measure(size, args.rounds))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
