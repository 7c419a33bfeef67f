"""What a person sees while the pilot runs: progress bars, one-line errors, the summary."""
from __future__ import annotations

import contextlib
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

STATUS_STYLE = {"passed": "green", "failed": "bold red", "error": "bold red", "skipped": "dim",
                "not_available": "yellow", "not_run": "dim"}


class PilotConsole:
    """Progress and the summary on ``console`` (stdout); errors on ``errors`` (stderr), never wrapped."""

    def __init__(self, console: Console | None = None, errors: Console | None = None):
        self.console = console or Console()
        self.errors = errors or Console(stderr=True, soft_wrap=True, highlight=False)

    @contextlib.contextmanager
    def progress(self, title: str, total: int | None):
        """A progress bar (or a spinner when ``total`` is None); yields ``advance()``."""
        columns = [SpinnerColumn(), TextColumn("{task.description}")]
        if total:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns.append(TimeElapsedColumn())
        # Off a terminal (CI logs, a pipe) a live bar leaves blank lines behind: only the ticks.
        with Progress(*columns, console=self.console, transient=True, disable=not self.console.is_terminal) as bar:
            task = bar.add_task(title, total=total)
            yield lambda: bar.advance(task)
        self.console.print(f"[dim]✓[/dim] {title}")

    def note(self, message: str) -> None:
        self.console.print(f"[yellow]note:[/yellow] {message}")

    def error(self, message: str) -> None:
        self.errors.print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True, highlight=False)

    def summary(self, report: dict, files: list[Path], kept: bool = False) -> None:
        """The run's verdict, its steps (if any ran) and where its report is; ``kept``: the last
        complete run's report is still beside it (this run stopped on an error)."""
        env = report["environment"]
        model = report.get("model") or {}
        self.console.print()
        self.console.print(f"[bold]Pilot report[/bold] — {model.get('architecture', 'no model')} on "
                           f"[bold]{env['device']}[/bold] ({report['config']['dtype']})")
        if env["emulated"]:
            self.console.print(f"[yellow]{env['time_basis']}[/yellow]")
        if any(step["status"] != "not_run" for step in report["steps"].values()):
            table = Table(show_lines=False)
            for col in ("step", "status", "seconds", "result"):
                table.add_column(col, overflow="fold")
            for step in report["steps"].values():
                style = STATUS_STYLE.get(step["status"], "")
                table.add_row(step["title"], f"[{style}]{step['status']}[/{style}]", f"{step['seconds']:.1f}",
                              step["summary"])
            self.console.print(table)
        s = report["summary"]
        verdict = {"passed": "[bold green]PASSED[/bold green]", "failed": "[bold red]FAILED[/bold red]",
                   "error": "[bold red]ERROR[/bold red]"}[report["status"]]
        self.console.print(f"{verdict}: {s['checks_passed']}/{s['checks_total']} checks passed in "
                           f"{report['duration_seconds']:.0f}s (exit code {report['exit_code']})")
        for name in s["failed_checks"]:
            self.console.print(f"  [red]✗[/red] {name}")
        self.console.print("report: " + "  ".join(map(str, files)))
        if kept:
            self.console.print(f"the last complete run's report and files in {files[0].parent} are kept")
