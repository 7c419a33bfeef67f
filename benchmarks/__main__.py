"""``python -m benchmarks`` (``make bench``): every benchmark, every backend, one table.

  python -m benchmarks                      # full suite, results in bench-results/
  python -m benchmarks --limits             # only the rows with a limit (~20 min on a quiet 2-core machine)
  python -m benchmarks --smoke              # tiny sizes, one pair (what CI runs)
  python -m benchmarks --only cpu,neuron,train,ops --pairs 10
  python -m benchmarks --combine runA runB --out both   # one report from two runs
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import report, xla_env
from .backends import BACKENDS, EAGER_WORKLOADS, IN_PROCESS_WORKLOADS
from .runner import COLLECTIVES, plan, run_suite

# The backends and workloads of the rows that have a limit (the report's verdicts): the eager rows
# against CPU eager, the compiled rows against CPU Inductor; the decode rows and the compiled
# training step also with both sides in one process.
LIMIT_ROWS = ("cpu,neuron,cpu_inductor,neuron_compiled,ops,generate,generate_static,decode_in_process,"
            "compiled_in_process,train")


def parse_only(text: str | None) -> tuple[list[str], list[str]]:
    """Split ``--only`` into backends and workloads; an empty side means all of them."""
    backends = [b.name for b in BACKENDS]
    workloads = [*EAGER_WORKLOADS, *IN_PROCESS_WORKLOADS, COLLECTIVES]
    if not text:
        return backends, workloads
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in backends and n not in workloads]
    if unknown:
        raise SystemExit(f"--only: unknown name(s) {', '.join(unknown)}; "
                         f"backends: {', '.join(backends)}; workloads: {', '.join(workloads)}")
    picked_backends = [n for n in backends if n in names] or backends
    picked_workloads = [n for n in workloads if n in names] or workloads
    return picked_backends, picked_workloads


def _versions(results: list[dict]) -> str:
    seen = {}
    for result in results:
        info = result.get("backend_info")
        if info:
            seen.setdefault(result["backend"], info)
    parts = [f"transformers {importlib.metadata.version('transformers')}"]
    for backend, info in seen.items():
        extras = ", ".join(f"{k} {info[k]}" for k in ("torch_neuronx", "torch_xla") if k in info)
        parts.append(f"{backend}: torch {info['torch']}" + (f", {extras}" if extras else "")
                     + f", {info['threads']} threads")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 repeat, no XLA set-up")
    parser.add_argument("--only", help="comma-separated backends and/or workloads")
    parser.add_argument("--limits", action="store_true",
                        help=f"only the rows that have a limit, to decide their verdicts ({LIMIT_ROWS}); "
                             "--threads 1 unless given")
    parser.add_argument("--pairs", "--repeats", type=int, dest="pairs",
                        help="rounds: fresh processes per cell, each paired with its reference's process "
                             "of the same round (default 10; smoke 1)")
    parser.add_argument("--compiled-pairs", type=int,
                        help="rounds for the backends that compile graphs (default 10, at most --pairs): "
                             "cpu_inductor and neuron_compiled compile cold in round 1 and reuse that "
                             "process's caches after it (warm); xla compiles cold in every process")
    parser.add_argument("--timeout", type=float, help="seconds per process (default 1800; smoke 300)")
    parser.add_argument("--threads", type=int,
                        help="PyTorch intra-op threads per worker (default: PyTorch's choice); "
                             "1 is steadier on a machine shared with other jobs")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory")
    parser.add_argument("--combine", type=Path, nargs="+", metavar="DIR",
                        help="no measuring: one report from the results.json of earlier runs")
    parser.add_argument("--no-xla-setup", action="store_true",
                        help="do not create the PyTorch/XLA venv if it is missing")
    args = parser.parse_args(argv)
    if args.limits and args.only:
        parser.error("--limits picks its own rows; leave out --only")
    if args.limits and args.threads is None:
        args.threads = 1
    backends, workloads = parse_only(LIMIT_ROWS if args.limits else args.only)
    size = "smoke" if args.smoke else "full"
    pairs = (1 if args.smoke else 10) if args.pairs is None else args.pairs
    compiled_pairs = min(pairs, (1 if args.smoke else 10) if args.compiled_pairs is None else args.compiled_pairs)
    timeout = (300.0 if args.smoke else 1800.0) if args.timeout is None else args.timeout
    if min(pairs, compiled_pairs) < 1 or timeout <= 0 or (args.threads is not None and args.threads < 1):
        parser.error("--pairs, --compiled-pairs and --threads must be ≥ 1 and --timeout > 0")

    if "xla" in backends and not (args.smoke or args.no_xla_setup or args.combine):
        reason = xla_env.setup()
        if reason:
            print(f"PyTorch/XLA unavailable, continuing without it: {reason}", file=sys.stderr)

    if args.combine:
        return write_report(*_combine(args.combine), args.out)
    start = time.monotonic()
    meta = {"size": size, "pairs": pairs, "compiled_pairs": compiled_pairs, "threads": args.threads,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": report.machine(), "load_start": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    steps = plan(backends, workloads, pairs, compiled_pairs)
    collectives = COLLECTIVES in workloads
    # Off a terminal (CI logs, a pipe) a live bar leaves blank lines behind: only the lines. The
    # pilot's and coverage's rule (rich's own terminal test); importing theirs would load torch here.
    console = Console()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("processes", total=len(steps) + collectives)

        def log(line: str) -> None:
            progress.console.print(line, highlight=False, markup=False)
            progress.advance(task)

        results = run_suite(steps, size, args.out, timeout, args.threads, collectives, log)
    meta.update(wall_s=time.monotonic() - start, versions=_versions(results),
                load_end=" ".join(f"{x:.1f}" for x in os.getloadavg()))
    return write_report(results, meta, args.out)


def _combine(directories: list[Path]) -> tuple[list[dict], dict]:
    """Raw results of earlier runs (e.g. backends run side by side) as one run."""
    runs = [json.loads((d / "results.json").read_text()) for d in directories]
    # Rounds pair processes of one run only: a run (itself perhaps combined) keeps its own number.
    run_ids: dict[tuple[int, int], int] = {}
    results = [{**result, "run": run_ids.setdefault((index, result.get("run", 0)), len(run_ids))}
               for index, run in enumerate(runs) for result in run["raw"]]
    metas = [run["meta"] for run in runs]
    meta = dict(metas[0])
    meta.update(date=" + ".join(m["date"] for m in metas),
                pairs=" + ".join(str(m.get("pairs", m.get("repeats"))) for m in metas),
                compiled_pairs=" + ".join(str(m.get("compiled_pairs", m.get("repeats"))) for m in metas),
                wall_s=max(m["wall_s"] for m in metas),
                versions=_versions(results), load_start="; ".join(m["load_start"] for m in metas),
                load_end="; ".join(m["load_end"] for m in metas),
                combined_from=[str(d) for d in directories])
    return results, meta


def write_report(results: list[dict], meta: dict, out: Path) -> int:
    rows = report.summarize(results)
    targets = report.ratios(rows, results)
    page = report.markdown(rows, targets, meta, results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        {"meta": meta, "rows": rows, "targets": targets, "raw": results}, indent=1))
    (out / "results.md").write_text(page)
    print(page)
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
