"""``python -m benchmarks`` (``make bench``): every benchmark, every backend, one table.

  python -m benchmarks                      # full suite, results in bench-results/
  python -m benchmarks --smoke              # tiny sizes, one repeat (what CI runs)
  python -m benchmarks --only cpu,neuron,train,ops
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

from . import report, xla_env
from .backends import BACKENDS, EAGER_WORKLOADS
from .runner import COLLECTIVES, run_suite


def parse_only(text: str | None) -> tuple[list[str], list[str]]:
    """Split ``--only`` into backends and workloads; an empty side means all of them."""
    backends = [b.name for b in BACKENDS]
    workloads = [*EAGER_WORKLOADS, COLLECTIVES]
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
    parser.add_argument("--repeats", type=int, help="fresh processes per cell (default 3; smoke 1)")
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
    backends, workloads = parse_only(args.only)
    size = "smoke" if args.smoke else "full"
    repeats = args.repeats or (1 if args.smoke else 3)
    timeout = args.timeout or (300.0 if args.smoke else 1800.0)
    if repeats < 1 or timeout <= 0 or (args.threads is not None and args.threads < 1):
        parser.error("--repeats and --threads must be ≥ 1 and --timeout > 0")

    if "xla" in backends and not (args.smoke or args.no_xla_setup or args.combine):
        reason = xla_env.setup()
        if reason:
            print(f"PyTorch/XLA unavailable, continuing without it: {reason}", file=sys.stderr)

    if args.combine:
        return write_report(*_combine(args.combine), args.out)
    start = time.monotonic()
    meta = {"size": size, "repeats": repeats, "threads": args.threads,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": report.machine(), "load_start": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    results = run_suite(backends, workloads, size, repeats, args.out, timeout, args.threads)
    meta.update(wall_s=time.monotonic() - start, versions=_versions(results),
                load_end=" ".join(f"{x:.1f}" for x in os.getloadavg()))
    return write_report(results, meta, args.out)


def _combine(directories: list[Path]) -> tuple[list[dict], dict]:
    """Raw results of earlier runs (e.g. backends run side by side) as one run."""
    runs = [json.loads((d / "results.json").read_text()) for d in directories]
    results = [result for run in runs for result in run["raw"]]
    metas = [run["meta"] for run in runs]
    meta = dict(metas[0])
    meta.update(date=" + ".join(m["date"] for m in metas), repeats=" + ".join(str(m["repeats"]) for m in metas),
                wall_s=max(m["wall_s"] for m in metas),
                versions=_versions(results), load_start="; ".join(m["load_start"] for m in metas),
                load_end="; ".join(m["load_end"] for m in metas),
                combined_from=[str(d) for d in directories])
    return results, meta


def write_report(results: list[dict], meta: dict, out: Path) -> int:
    rows = report.summarize(results)
    targets = report.ratios(rows)
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
