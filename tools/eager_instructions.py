"""Instructions per eager op, decoded token and training step, ``neuron`` next to CPU, counted by callgrind.

  python -m tools.eager_instructions                  # add, mul, fill_ (64×64), decode, train
  python -m tools.eager_instructions --only add,decode --ops 5000 --tokens 5 --steps 1
  python -m tools.eager_instructions --only train --steps 1 --size smoke   # minutes, not hours
  python -m tools.eager_instructions --only decode --tokens 5 --cache      # + cache and branch simulation
  python -m tools.eager_instructions --only decode --tokens 5 --cache --by-function 30

A host measurement that load does not disturb: each (workload, device) runs in its own process
under ``valgrind --tool=callgrind`` with collection switched on only around the measured loop
(``torch._C._valgrind_toggle``), so start-up, model building and warm-up are not counted. Wall
times on a shared machine swing by tens of percent; instruction counts by well under one. They
are not times (a cache miss costs more than an add), but the device path's own cost is
bookkeeping — aliasing, accounting, allocation — whose instructions track its time closely.
Where ops alternate (a decode step) the bookkeeping's footprint costs as much as its
instructions: ``--cache`` adds callgrind's cache and branch simulation (several times slower)
and reports L1 instruction and data misses and mispredicted branches next to the instructions.
``--by-function N`` says where a difference is: the N functions whose own (exclusive) counts
differ most between the devices, per unit, for each counted event: a difference in the
totals alone does not say whether it is our code or other code (the interpreter, PyTorch)
slowed by our footprint.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OPS = ("add", "mul", "fill_")
WORKLOADS = (*OPS, "decode", "train")
UNITS = {"decode": "token", "train": "step"}
REPO = Path(__file__).resolve().parent.parent


def run_workload(workload: str, device: str, count: int, toggle, size: str = "full") -> None:
    """The measured loop: ``count`` 64×64 ops, the ``count - 1`` decode steps of a
    static-cache ``generate()`` of ``count`` tokens after a warm-up one, or ``count`` steps of
    the benchmark suite's training workload after a warm-up one, with the suite's model at
    ``size`` (a full-size training step took over 7 minutes per device under callgrind).
    ``toggle`` switches counting on and off around it."""
    import torch

    import torch_neuronx  # noqa: F401  (registers the device)

    torch.set_num_threads(1)
    if workload in OPS:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(64, 64, generator=gen).to(device)
        b = torch.randn(64, 64, generator=gen).to(device)
        op = {"add": lambda: torch.add(a, b), "mul": lambda: torch.mul(a, b),
              "fill_": lambda: a.fill_(1.0)}[workload]
        for _ in range(50):  # warm-up: the kernel signature, the allocator
            op()
        toggle()
        for _ in range(count):
            op()
        toggle()
        return
    from benchmarks.model import SIZES, eager_decoder, static_greedy

    model_size = SIZES[size]
    if workload == "train":
        _train_steps(model_size, device, count, toggle)
        return
    model, prompt = eager_decoder(model_size, device)
    settings = static_greedy(count)
    with torch.no_grad():
        model.generate(prompt, **settings)  # warm-up: the static cache, the kernel signatures
        model.generate(prompt, streamer=_DecodeSteps(toggle), **settings)


def _train_steps(size, device: str, count: int, toggle) -> None:
    """The suite's ``train`` workload (benchmarks/workloads.py): AdamW on the benchmark Llama,
    one batch of ``size.batch`` × ``size.seq`` tokens per step; the first step (optimizer state,
    kernel signatures) is not counted."""
    import torch

    from benchmarks.model import build_model, token_batch

    model = build_model(size).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(index: int) -> None:
        ids = token_batch(size, size.seq, index).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        loss.item()

    step(0)
    toggle()
    for index in range(1, count + 1):
        step(index)
    toggle()


class _DecodeSteps:
    """A ``generate()`` streamer counting only decode steps: on once the first new token is out
    (the prompt's prefill is behind), off when generation ends, so ``count`` tokens give
    ``count - 1`` steps."""

    def __init__(self, toggle):
        self.toggle, self.puts = toggle, 0

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:  # the prompt, then the first generated token
            self.toggle()

    def end(self) -> None:
        self.toggle()


# What --cache reports, summed from callgrind's events (I1mr; D1mr + D1mw; Bcm + Bim).
CACHE_EVENTS = {"I1 misses": ("I1mr",), "D1 misses": ("D1mr", "D1mw"), "mispredicts": ("Bcm", "Bim")}


def parse_events(stderr: str) -> dict[str, int]:
    """callgrind's collected totals by event name (its "Events :" and "Collected :" lines)."""
    names = re.search(r"Events\s*:\s*([^\n]+)", stderr)
    values = re.search(r"Collected\s*:\s*([\d ]+)", stderr)
    if names is None or values is None:
        return {}
    return dict(zip(names.group(1).split(), map(int, values.group(1).split())))


def count_instructions(workload: str, device: str, count: int, valgrind: str, size: str = "full",
                       cache: bool = False, keep: Path | None = None) -> dict[str, int]:
    """callgrind's totals in one child process running the measured loop: ``Ir`` (instructions),
    with ``cache`` also the cache and branch simulation's events; ``keep``: where to leave
    callgrind's output file (per-function counts, ``by_function``)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = keep or Path(scratch) / "callgrind.out"
        command = [valgrind, "--tool=callgrind", "--collect-atstart=no",
                   *(["--cache-sim=yes", "--branch-sim=yes"] if cache else []),
                   f"--callgrind-out-file={out}", sys.executable, "-m", "tools.eager_instructions",
                   "--child", workload, device, str(count), size]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        events = parse_events(done.stderr)
        if done.returncode != 0 or "Ir" not in events:
            raise SystemExit(f"{workload} on {device}: the callgrind run failed:\n{done.stderr[-2000:]}")
        return events


def parse_annotate(text: str) -> dict[str, int]:
    """A ``callgrind_annotate`` listing's count per function (its first event column), keyed by
    the function's name without its source file and object, as both devices' runs share them."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.+)$", line)
        if match is None or match.group(2) == "PROGRAM TOTALS":
            continue
        name = re.sub(r" \[[^\]]*\]$", "", match.group(2))
        name = name.split(":", 1)[1] if ":" in name.split("(", 1)[0] else name
        counts[name] = counts.get(name, 0) + int(match.group(1).replace(",", ""))
    return counts


def by_function(paths: dict[str, Path], event: str) -> dict[str, dict[str, int]]:
    """Per device, each function's own (exclusive) count of ``event`` in a kept callgrind file."""
    annotate = shutil.which("callgrind_annotate") or "callgrind_annotate"
    return {device: parse_annotate(subprocess.run(
        [annotate, "--inclusive=no", "--auto=no", "--threshold=100", f"--show={event}", str(path)],
        capture_output=True, text=True, check=True).stdout) for device, path in paths.items()}


def function_table(workload: str, event: str, counts: dict[str, dict[str, int]], per: int,
                   top: int) -> str:
    """The ``top`` functions whose counts differ most (neuron − CPU), per unit of ``workload``."""
    cpu, neuron = counts["cpu"], counts["neuron"]
    names = sorted(set(cpu) | set(neuron), key=lambda n: (-abs(neuron.get(n, 0) - cpu.get(n, 0)), n))
    lines = [f"`{workload}`, {event} per {UNITS.get(workload, 'op')}, the functions' own counts:", "",
             "| function | CPU | neuron | neuron − CPU |", "|---|---|---|---|"]
    for name in names[:top]:
        a, b = cpu.get(name, 0) / per, neuron.get(name, 0) / per
        shown = name if len(name) <= 120 else name[:117] + "..."
        lines.append(f"| `{shown}` | {a:,.0f} | {b:,.0f} | {b - a:+,.0f} |")
    return "\n".join(lines)


def measure(workloads, ops: int, tokens: int, steps: int, valgrind: str, size: str = "full",
            log=print, cache: bool = False, top: int = 0) -> list[dict]:
    rows = []
    # One scratch directory for the kept callgrind files (``top``), removed however the run ends.
    with tempfile.TemporaryDirectory() as scratch:
        for workload in workloads:
            count = {"decode": tokens, "train": steps}.get(workload, ops)
            measured = count - 1 if workload == "decode" else count
            per, misses = {}, {}
            kept = ({device: Path(scratch) / f"{workload}.{device}.callgrind" for device in ("cpu", "neuron")}
                    if top else {})
            for device in ("cpu", "neuron"):
                events = count_instructions(workload, device, count, valgrind, size, cache, kept.get(device))
                per[device] = events["Ir"] / measured
                log(f"{workload} on {device}: {per[device]:,.0f} instructions per "
                    f"{UNITS.get(workload, 'op')}")
                if cache:
                    misses[device] = {name: sum(events[e] for e in parts) / measured
                                      for name, parts in CACHE_EVENTS.items()}
            row = {"workload": workload, "count": measured, **per, "ratio": per["neuron"] / per["cpu"],
                   "size": "full" if workload in OPS else size}
            if cache:
                row["misses"] = misses
            if top:
                row["functions"] = [function_table(workload, event, by_function(kept, event), measured, top)
                                    for event in ("Ir", *(e for es in CACHE_EVENTS.values() for e in es if cache))]
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["Host measurement: instructions counted by callgrind, one process per cell, "
             "counting only the measured loop.", "",
             "| workload | per | CPU | neuron | neuron − CPU | ratio |", "|---|---|---|---|---|---|"]
    for r in rows:
        unit = UNITS.get(r["workload"], "op (64×64)")
        if r.get("size", "full") != "full":
            unit += f" ({r['size']} model)"
        lines.append(f"| `{r['workload']}` | {unit} | {r['cpu']:,.0f} | {r['neuron']:,.0f} | "
                     f"{r['neuron'] - r['cpu']:+,.0f} | {r['ratio']:.3f} |")
    cached = [r for r in rows if "misses" in r]
    if cached:
        lines += ["", "Cache and branch simulation (callgrind `--cache-sim=yes --branch-sim=yes`), "
                  "per the same unit:", "", "| workload | event | CPU | neuron | neuron − CPU | ratio |",
                  "|---|---|---|---|---|---|"]
        for r in cached:
            for name in CACHE_EVENTS:
                cpu, neuron = r["misses"]["cpu"][name], r["misses"]["neuron"][name]
                lines.append(f"| `{r['workload']}` | {name} | {cpu:,.0f} | {neuron:,.0f} | "
                             f"{neuron - cpu:+,.0f} | {neuron / cpu:.3f} |")
    for r in rows:
        for table in r.get("functions", ()):
            lines += ["", table]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated workloads of {', '.join(WORKLOADS)}")
    parser.add_argument("--ops", type=int, default=20000, help="measured calls per op workload")
    parser.add_argument("--tokens", type=int, default=9, help="generated tokens of the decode (all but the first measured)")
    parser.add_argument("--steps", type=int, default=2, help="measured training steps (after an unmeasured one)")
    parser.add_argument("--size", choices=("full", "smoke"), default="full",
                        help="the suite's model size for decode and train (smoke: the CI model)")
    parser.add_argument("--cache", action="store_true",
                        help="also simulate caches and branches: L1 misses and mispredicts (slower)")
    parser.add_argument("--by-function", type=int, default=0, metavar="N",
                        help="also list the N functions whose own counts differ most between the devices")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--child", nargs=4, metavar=("WORKLOAD", "DEVICE", "COUNT", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        import torch

        workload, device, count, size = args.child
        run_workload(workload, device, int(count), torch._C._valgrind_toggle, size)
        return
    workloads = [w.strip() for w in (args.only or ",".join(WORKLOADS)).split(",") if w.strip()]
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown or args.ops < 1 or args.tokens < 2 or args.steps < 1:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}"
                     if unknown else "--ops and --steps must be ≥ 1 and --tokens ≥ 2")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind); it counts the instructions")
    text = markdown(measure(workloads, args.ops, args.tokens, args.steps, valgrind, args.size,
                            cache=args.cache, top=args.by_function))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
