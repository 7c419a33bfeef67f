"""``torchneuron coverage``: sweep every causal-LM architecture of the installed Transformers.

See docs/coverage.md for the checks, the isolation and how the figures are computed.
Exit code (``runtime/exit_codes.py``): SUCCESS when no architecture fails on the device while
passing on CPU (and, with ``--compiled``, no compiled check fails in the emulator only), FAILURE
otherwise, USER_ERROR for bad options.
"""
from __future__ import annotations

import argparse
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class SweepRequest:
    """A sweep's options, every one checked: what ``validate`` hands to the sweep and the report."""

    device: str
    architectures: list[str]  # the selection, in the order the report lists it
    installed: list[str]  # every causal-LM architecture of the installed Transformers
    selection: dict  # --only, --limit, --popular as given (the report records them)
    jobs: int
    timeout: float
    layers: int
    lowering: bool
    compiled: bool
    out: Path
    resume: bool

    def log_options(self) -> dict:
        """The options a result depends on: ``--resume`` keeps only results logged with the same ones."""
        from torch_neuronx.testing.tiny_models import TinySize

        options = {"device": self.device, "lowering": self.lowering, "compiled": self.compiled}
        if self.layers != TinySize().layers:  # logs written before --layers existed stay resumable
            options["layers"] = self.layers
        return options


@dataclasses.dataclass(frozen=True)
class CoverageReport:
    """What ``coverage.json`` holds: the request, every architecture's result and the figures."""

    request: SweepRequest
    results: list[dict]
    summary: dict
    created_utc: str
    versions: dict  # torch, transformers

    @property
    def failed(self) -> bool:
        """An architecture fails on the device only, or a compiled check fails in the emulator only."""
        ours = self.summary["overall"].get("compiled", {}).get("ours_failures", [])
        return bool(self.summary["device_failures"] or ours)

    def to_json(self) -> dict:
        from torch_neuronx.coverage.probe import CHECKS

        request = self.request
        return {
            "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "created_utc": self.created_utc,
            "device": request.device, **self.versions, "checks": list(CHECKS), "selection": request.selection,
            "layers": request.layers, "lowering_checked": request.lowering, "compiled_checked": request.compiled,
            "summary": self.summary, "results": self.results,
        }


def validate(args: argparse.Namespace) -> SweepRequest:
    """Every option checked before a worker starts: a sweep on an unusable device is minutes of
    failures. Raises ``UsageError`` with one line naming the option."""
    from torch_neuronx.pilot.config import PilotError
    from torch_neuronx.pilot.device import resolve_device
    from torch_neuronx.runtime.errors import UsageError

    installed = installed_architectures()
    timeout = args.timeout if args.timeout is not None else (COMPILED_TIMEOUT if args.compiled else DEFAULT_TIMEOUT)
    try:
        if args.jobs < 1 or not math.isfinite(timeout) or timeout <= 0:
            raise UsageError("--jobs must be at least 1 and --timeout a positive number of seconds")
        if args.limit is not None and args.limit < 1:
            raise UsageError(f"--limit must be at least 1 (got {args.limit})")
        if args.layers < 1:
            raise UsageError(f"--layers must be at least 1 (got {args.layers})")
        chosen = select(args, installed)
        if args.instance:  # exported: the workers see it too
            import torch_neuronx

            torch_neuronx.reconfigure(instance=args.instance)
        resolve_device(args.device)
    except PilotError as exc:  # the device named by --device cannot be used
        raise UsageError(str(exc)) from None
    return SweepRequest(
        device=args.device, architectures=chosen, installed=installed,
        selection={"only": args.only, "limit": args.limit, "popular": args.popular}, jobs=args.jobs,
        timeout=timeout, layers=args.layers, lowering=not args.no_lowering, compiled=args.compiled,
        out=Path(args.out), resume=args.resume)


def sweep(request: SweepRequest, console) -> list[dict]:
    """Probe the architectures the log does not hold yet, one line each as it finishes; returns
    every selected architecture's result, in the selection's order."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from torch_neuronx.coverage.sweep import ResultLog, run_sweep

    request.out.mkdir(parents=True, exist_ok=True)
    log = ResultLog(request.out / "results.jsonl", request.log_options(), resume=request.resume)
    todo = [m for m in request.architectures if m not in log.done]
    if log.done:
        console.print(f"resuming: {len(request.architectures) - len(todo)} of {len(request.architectures)} "
                      f"architectures already done ({log.path})")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(f"coverage on {request.device}", total=len(todo))

        def on_result(result: dict) -> None:
            log.add(result)
            bar.advance(task)
            compiled = result.get("compiled", {}).get("status")
            bar.console.print(f"{result['model_type']:<28} [{STATUS_STYLE.get(result['status'], '')}]"
                              f"{result['status']}[/]" + (f"  compiled: [{STATUS_STYLE[compiled]}]{compiled}[/]"
                                                          if compiled else ""))

        run_sweep(todo, request.device, request.jobs, request.timeout, request.out, on_result,
                  lower=request.lowering, compiled=request.compiled, layers=request.layers)
    return [log.done[m] for m in request.architectures if m in log.done]


def build_report(request: SweepRequest, results: list[dict]) -> CoverageReport:
    """The figures over ``results`` (``coverage.sweep.summarise``) with the versions and the time."""
    import torch
    import transformers

    from torch_neuronx.coverage.sweep import summarise

    return CoverageReport(
        request=request, results=results, summary=summarise(results, request.installed),
        created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        versions={"torch": torch.__version__, "transformers": transformers.__version__})


def write_report(report: CoverageReport) -> list[Path]:
    """``coverage.json``, and with ``--compiled`` the compiled columns as Markdown; returns the paths."""
    from torch_neuronx.coverage.markdown import compiled_markdown

    out = report.request.out
    written = [out / "coverage.json"]
    written[0].write_text(json.dumps(report.to_json(), indent=2))
    if report.request.compiled:
        written.append(out / "coverage-compiled.md")
        written[1].write_text(compiled_markdown(report.to_json()))
    return written


def render(console, report: CoverageReport) -> None:
    """The per-check table, the figures per scope and, with ``--compiled``, the compiled columns."""
    from rich.table import Table

    from torch_neuronx.coverage.probe import CHECKS

    device, summary = report.request.device, report.summary
    table = Table(title=f"causal-LM architectures on {device} (device / CPU per check)")
    table.add_column("architecture")
    table.add_column("status")
    for c in CHECKS:
        table.add_column(c.replace("generate_", "gen "), justify="center")
    table.add_column("lowers", justify="center")
    table.add_column("first problem", overflow="fold")
    for r in report.results:
        dev, cpu = r.get("device_checks", {}), r.get("cpu", {})
        table.add_row(r["model_type"], f"[{STATUS_STYLE.get(r['status'], '')}]{r['status']}[/]",
                      *[f"{_mark(dev.get(c))}/{_mark(cpu.get(c))}" if cpu else "–" for c in CHECKS],
                      _lowers_mark(r), _first_problem(r)[:160])
    console.print(table)
    for scope in ("overall", "popular"):
        f = summary[scope]
        console.print(
            f"[bold]{scope}[/bold]: {f['pass']}/{f['architectures']} architectures pass every check on {device}; "
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
    if report.request.compiled:
        _print_compiled(console, report.results, summary)


def _first_problem(result: dict) -> str:
    """The architecture's error, else its first failing device check, else why a kernel does not lower."""
    from torch_neuronx.coverage.probe import CHECKS

    dev = result.get("device_checks", {})
    problem = result.get("error") or next(
        (f"{c}: {dev[c]['error']}" for c in CHECKS if c in dev and not dev[c]["ok"]), "")
    lowering_error = (result.get("lowers") or {}).get("error")
    return problem or (f"lowers: {lowering_error}" if lowering_error else "")


def run(args: argparse.Namespace) -> int:
    """validate → sweep → build the report → write it → render it; the exit code says whether the
    device (or the compiled path) failed where the CPU did not."""
    from rich.console import Console

    from torch_neuronx.runtime.exit_codes import ExitCode

    console = Console()
    request = validate(args)
    report = build_report(request, sweep(request, console))
    written = write_report(report)
    render(console, report)
    console.print("report: " + ", ".join(str(path) for path in written))
    return ExitCode.FAILURE if report.failed else ExitCode.SUCCESS


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
