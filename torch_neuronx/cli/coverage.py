"""``torchneuron coverage``: sweep every causal-LM architecture of the installed Transformers.

See docs/coverage.md for the checks, the isolation and how the figures are computed.
Exit code (``runtime/exit_codes.py``): SUCCESS when no architecture fails on the device while
passing on CPU, FAILURE otherwise, USER_ERROR for bad options.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
from pathlib import Path

SCHEMA_NAME, SCHEMA_VERSION = "torchneuron-coverage", "1.0"


def installed_architectures() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def select(args: argparse.Namespace, installed: list[str]) -> list[str]:
    from torch_neuronx.coverage.popular import POPULAR_TEXT_GENERATION
    from torch_neuronx.runtime.errors import UsageError

    chosen = installed
    if args.popular:
        chosen = [m for m in POPULAR_TEXT_GENERATION if m in installed]
    if args.only:
        wanted = [m.strip() for m in args.only.split(",") if m.strip()]
        unknown = [m for m in wanted if m not in installed]
        if unknown:
            raise UsageError(f"not a causal-LM architecture of the installed Transformers: {', '.join(unknown)}")
        chosen = wanted
    return chosen[: args.limit] if args.limit else chosen


def _mark(check: dict | None) -> str:
    return "[green]✓[/green]" if check and check["ok"] else "[red]✗[/red]"


def _lowers_mark(result: dict) -> str:
    """✓ every device kernel lowers to StableHLO, ✗ some would fall back to CPU, – not checked."""
    check = result.get("lowers")
    return "–" if check is None or check["ok"] is None else _mark(check)


STATUS_STYLE = {"pass": "green", "device_fail": "bold red", "cpu_fail": "yellow", "build_failed": "dim"}


def run(args: argparse.Namespace) -> int:
    import torch
    import transformers
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from torch_neuronx.coverage.probe import CHECKS
    from torch_neuronx.coverage.sweep import run_sweep, summarise

    from torch_neuronx.pilot.config import PilotError
    from torch_neuronx.pilot.device import resolve_device
    from torch_neuronx.runtime.errors import UsageError
    from torch_neuronx.runtime.exit_codes import ExitCode

    console = Console()
    installed = installed_architectures()
    try:  # every option checked before a worker starts: a sweep on an unusable device is minutes of failures
        if args.jobs < 1 or not math.isfinite(args.timeout) or args.timeout <= 0:
            raise UsageError("--jobs must be at least 1 and --timeout a positive number of seconds")
        if args.limit is not None and args.limit < 1:
            raise UsageError(f"--limit must be at least 1 (got {args.limit})")
        chosen = select(args, installed)
        resolve_device(args.device)
    except PilotError as exc:  # the device named by --device cannot be used
        raise UsageError(str(exc)) from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(f"coverage on {args.device}", total=len(chosen))

        def on_result(result: dict) -> None:
            bar.advance(task)
            bar.console.print(f"{result['model_type']:<28} [{STATUS_STYLE.get(result['status'], '')}]"
                              f"{result['status']}[/]")

        results = run_sweep(chosen, args.device, args.jobs, args.timeout, out, on_result, lower=not args.no_lowering)
    summary = summarise(results, installed)
    report = {
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": args.device, "torch": torch.__version__, "transformers": transformers.__version__,
        "checks": list(CHECKS), "selection": {"only": args.only, "limit": args.limit, "popular": args.popular},
        "lowering_checked": not args.no_lowering,
        "summary": summary, "results": results,
    }
    (out / "coverage.json").write_text(json.dumps(report, indent=2))

    table = Table(title=f"causal-LM architectures on {args.device} (device / CPU per check)")
    table.add_column("architecture")
    table.add_column("status")
    for c in CHECKS:
        table.add_column(c.replace("generate_", "gen "), justify="center")
    table.add_column("lowers", justify="center")
    table.add_column("first problem", overflow="fold")
    for r in results:
        dev, cpu = r.get("device_checks", {}), r.get("cpu", {})
        problem = r.get("error") or next((f"{c}: {dev[c]['error']}" for c in CHECKS if c in dev and not dev[c]["ok"]),
                                         "")
        lowering_error = (r.get("lowers") or {}).get("error")
        problem = problem or (f"lowers: {lowering_error}" if lowering_error else "")
        table.add_row(r["model_type"], f"[{STATUS_STYLE.get(r['status'], '')}]{r['status']}[/]",
                      *[f"{_mark(dev.get(c))}/{_mark(cpu.get(c))}" if cpu else "–" for c in CHECKS],
                      _lowers_mark(r), problem[:160])
    console.print(table)
    for scope in ("overall", "popular"):
        f = summary[scope]
        console.print(
            f"[bold]{scope}[/bold]: {f['pass']}/{f['architectures']} architectures pass every check on {args.device}; "
            f"coverage {f['coverage_percent']}% of the {f['cpu_clean']} that pass every check on CPU; "
            f"device matches CPU on {f['parity_percent']}% of those that build; "
            f"{f['cpu_fail']} fail on CPU too, {f['build_failed']} cannot be built tiny")
        if f["coverage_percent_with_lowering"] is not None:
            console.print(f"  with the lowering check: {f['lowers']}/{f['lowering_checked']} lower every kernel to "
                          f"StableHLO; coverage {f['coverage_percent_with_lowering']}%")
    if summary["ops_not_lowered"]:
        console.print("[bold yellow]ops that do not lower (would fall back to CPU):[/bold yellow] "
                      + ", ".join(f"{op} ({len(arch)})" for op, arch in summary["ops_not_lowered"].items()))
    if summary["device_failures"]:
        console.print(f"[bold red]device-only failures:[/bold red] {', '.join(summary['device_failures'])}")
    console.print(f"report: {out / 'coverage.json'}")
    return ExitCode.FAILURE if summary["device_failures"] else ExitCode.SUCCESS


def add_parser(sub) -> None:
    p = sub.add_parser("coverage", help="check every causal-LM architecture of the installed Transformers",
                       description="Each architecture is built tiny from its config class (offline) and checked "
                       "for forward, backward, generate (dynamic and static cache), logits parity with CPU and "
                       "save/load, in isolated worker processes.")
    p.add_argument("--device", default="neuron", help="device to check against the CPU (default neuron)")
    p.add_argument("--only", default=None, help="comma-separated model types, e.g. llama,gpt2")
    p.add_argument("--popular", action="store_true", help="only the curated list of widely used architectures")
    p.add_argument("--limit", type=int, default=None, help="at most this many architectures")
    p.add_argument("--jobs", type=int, default=1, help="worker processes in parallel (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per architecture (default 300)")
    p.add_argument("--out", default="coverage-report", help="output directory (default coverage-report)")
    p.add_argument("--no-lowering", action="store_true",
                   help="skip the check that every device kernel lowers to StableHLO (needs torch-mlir; slower)")
    p.set_defaults(func=run)
