"""``torchneuron coverage``: sweep every causal-LM architecture of the installed Transformers.

See docs/coverage.md for the checks, the isolation and how the figures are computed.
Exit code (``runtime/exit_codes.py``): SUCCESS when no architecture fails on the device while
passing on CPU (and, with ``--compiled``, no compiled check fails in the emulator only), FAILURE
otherwise, USER_ERROR for bad options.
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
    from torch_neuronx.runtime.spellings import pick

    chosen = installed
    if args.popular:
        chosen = [m for m in POPULAR_TEXT_GENERATION if m in installed]
    if args.only:
        chosen = [pick(m, installed, "--only", "a causal-LM architecture of the installed Transformers")
                  for m in args.only.split(",") if m.strip()]
    return chosen[: args.limit] if args.limit else chosen


def _mark(check: dict | None) -> str:
    return "[green]✓[/green]" if check and check["ok"] else "[red]✗[/red]"


def _lowers_mark(result: dict) -> str:
    """✓ every device kernel lowers to StableHLO, ✗ some would fall back to CPU, – not checked."""
    check = result.get("lowers")
    return "–" if check is None or check["ok"] is None else _mark(check)


STATUS_STYLE = {"pass": "green", "device_fail": "bold red", "cpu_fail": "yellow", "build_failed": "dim",
                "shared_fail": "yellow", "ours_fail": "bold red", "not_run": "dim"}
DEFAULT_TIMEOUT, COMPILED_TIMEOUT = 300.0, 1200.0


def run(args: argparse.Namespace) -> int:
    import torch
    import transformers
    from rich.console import Console

    import torch_neuronx
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from torch_neuronx.coverage.markdown import compiled_markdown
    from torch_neuronx.coverage.probe import CHECKS
    from torch_neuronx.coverage.sweep import ResultLog, run_sweep, summarise
    from torch_neuronx.pilot.config import PilotError
    from torch_neuronx.pilot.device import resolve_device
    from torch_neuronx.runtime.errors import UsageError
    from torch_neuronx.runtime.exit_codes import ExitCode
    from torch_neuronx.testing.tiny_models import TinySize

    console = Console()
    installed = installed_architectures()
    if args.timeout is None:
        args.timeout = COMPILED_TIMEOUT if args.compiled else DEFAULT_TIMEOUT
    try:  # every option checked before a worker starts: a sweep on an unusable device is minutes of failures
        if args.jobs < 1 or not math.isfinite(args.timeout) or args.timeout <= 0:
            raise UsageError("--jobs must be at least 1 and --timeout a positive number of seconds")
        if args.limit is not None and args.limit < 1:
            raise UsageError(f"--limit must be at least 1 (got {args.limit})")
        if args.layers < 1:
            raise UsageError(f"--layers must be at least 1 (got {args.layers})")
        chosen = select(args, installed)
        if args.instance:  # exported: the workers see it too
            torch_neuronx.reconfigure(instance=args.instance)
        resolve_device(args.device)
    except PilotError as exc:  # the device named by --device cannot be used
        raise UsageError(str(exc)) from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = {"device": args.device, "lowering": not args.no_lowering, "compiled": args.compiled}
    if args.layers != TinySize().layers:  # logs written before --layers existed (docs/compiled-sweep) stay resumable
        options["layers"] = args.layers
    log = ResultLog(out / "results.jsonl", options, resume=args.resume)
    todo = [m for m in chosen if m not in log.done]
    if log.done:
        console.print(f"resuming: {len(chosen) - len(todo)} of {len(chosen)} architectures already done "
                      f"({log.path})")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(f"coverage on {args.device}", total=len(todo))

        def on_result(result: dict) -> None:
            log.add(result)
            bar.advance(task)
            compiled = result.get("compiled", {}).get("status")
            bar.console.print(f"{result['model_type']:<28} [{STATUS_STYLE.get(result['status'], '')}]"
                              f"{result['status']}[/]" + (f"  compiled: [{STATUS_STYLE[compiled]}]{compiled}[/]"
                                                          if compiled else ""))

        run_sweep(todo, args.device, args.jobs, args.timeout, out, on_result, lower=not args.no_lowering,
                  compiled=args.compiled, layers=args.layers)
    results = [log.done[m] for m in chosen if m in log.done]
    summary = summarise(results, installed)
    report = {
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": args.device, "torch": torch.__version__, "transformers": transformers.__version__,
        "checks": list(CHECKS), "selection": {"only": args.only, "limit": args.limit, "popular": args.popular},
        "layers": args.layers,
        "lowering_checked": not args.no_lowering, "compiled_checked": args.compiled,
        "summary": summary, "results": results,
    }
    (out / "coverage.json").write_text(json.dumps(report, indent=2))
    if args.compiled:
        (out / "coverage-compiled.md").write_text(compiled_markdown(report))

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
    ours = summary["overall"].get("compiled", {}).get("ours_failures", [])
    if args.compiled:
        _print_compiled(console, results, summary)
    console.print(f"report: {out / 'coverage.json'}" + (f", {out / 'coverage-compiled.md'}" if args.compiled else ""))
    return ExitCode.FAILURE if summary["device_failures"] or ours else ExitCode.SUCCESS


def _print_compiled(console, results: list[dict], summary: dict) -> None:
    """The compiled columns: per attention implementation, forward / backward / static-cache generate."""
    from rich.markup import escape
    from rich.table import Table

    from torch_neuronx.coverage.compiled import ATTENTION
    from torch_neuronx.coverage.markdown import LEGEND, compiled_cells, first_compiled_failure

    table = Table(title=f"torch.compile(backend=\"neuron\"), graph lowering on: {' | '.join(ATTENTION)} × "
                        "forward, backward, generate (static cache)", caption=LEGEND.replace("**", ""))
    table.add_column("architecture")
    for attention in ATTENTION:
        table.add_column(attention, justify="center")
    table.add_column("compiled")
    table.add_column("first failure", overflow="fold")
    for r in (r for r in results if "compiled" in r):
        cells = [c.replace("**", "") for c in compiled_cells(r["compiled"])]
        per_attention = [" ".join(cells[i:i + 3]) for i in range(0, len(cells), 3)]
        status = r["compiled"]["status"]
        table.add_row(r["model_type"], *per_attention, f"[{STATUS_STYLE[status]}]{status}[/]",
                      escape(first_compiled_failure(r)[:160]))
    console.print(table)
    for scope in ("overall", "popular"):
        f = summary[scope].get("compiled")
        if f and f["checked"]:
            console.print(f"[bold]{scope} compiled[/bold]: {f['pass']}/{f['checked']} pass, {f['shared_fail']} fail "
                          f"as the real product would, {f['ours_fail']} fail in the emulator only; "
                          f"{f['eager_passing_compiled_pass']}/{f['eager_passing']} of those passing the eager "
                          "checks pass compiled")


def add_parser(sub) -> None:
    from torch_neuronx.cli.options import add_instance
    from torch_neuronx.testing.tiny_models import TinySize

    p = sub.add_parser("coverage", help="check every causal-LM architecture of the installed Transformers",
                       description="Each architecture is built tiny from its config class (offline) and checked "
                       "for forward, backward, generate (dynamic and static cache), logits parity with CPU and "
                       "save/load, in isolated worker processes.")
    p.add_argument("--device", default="neuron", help="device to check against the CPU (default neuron)")
    add_instance(p, "the device's cores and HBM in every worker")
    p.add_argument("--only", default=None, help="comma-separated model types, e.g. llama,gpt2")
    p.add_argument("--popular", action="store_true", help="only the curated list of widely used architectures")
    p.add_argument("--limit", type=int, default=None, help="at most this many architectures")
    p.add_argument("--jobs", type=int, default=1, help="worker processes in parallel (default 1)")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per architecture (default {DEFAULT_TIMEOUT:.0f}, {COMPILED_TIMEOUT:.0f} with --compiled)")
    p.add_argument("--out", default="coverage-report", help="output directory (default coverage-report)")
    p.add_argument("--layers", type=int, default=TinySize().layers,
                   help=f"decoder layers of each tiny model (default {TinySize().layers}; a hybrid architecture "
                   "keeps one layer of each kind, so it may get more); fewer builds and compiles faster")
    p.add_argument("--no-lowering", action="store_true",
                   help="skip the check that every device kernel lowers to StableHLO (needs torch-mlir; slower)")
    p.add_argument("--compiled", action="store_true",
                   help="add the compiled columns: torch.compile(backend='neuron') forward, backward and "
                   "static-cache generate per attention implementation (sdpa, eager); several times slower")
    p.add_argument("--resume", action="store_true",
                   help="keep the architectures already done in --out (results.jsonl, same options) and run the rest")
    p.set_defaults(func=run)
