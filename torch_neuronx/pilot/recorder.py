"""The pilot's report as it is being made: each step's section, timed and settled as its parts end.

The recorder owns the :class:`~.report.Report` of one run and writes it after every
part, so a failure later on never erases what already ran. It knows nothing of the
order of the steps (``procedure.py``) nor of what a step computes (``steps/``).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import time
import traceback
from pathlib import Path

import torch

from ..runtime.errors import ConfigError, first_line
from ..runtime.exit_codes import ExitCode
from ..runtime.staged_files import write_text_whole
from .config import PilotConfig, PilotError
from .report import STEP_ORDER, Check, Report, StepSection, to_json_text
from .report.schema import Environment, ReportError
from .steps import STEPS


class ReportNotWritten(Exception):
    """The report cannot be written (a full disk): the run stops, nothing is published."""


def _versions() -> dict:
    import torch_neuronx

    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    return {"torchneuron": torch_neuronx.__version__, "torch": torch.__version__,
            "transformers": tf_version, "python": platform.python_version()}


def new_report(cfg: PilotConfig) -> Report:
    """An empty report of a run of ``cfg``: every step ``not_run``, the status ``error`` until it ends."""
    return Report(
        created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        tool=_versions(),
        environment=Environment(device=cfg.device, device_type=cfg.device.split(":")[0],
                                host={"cpus": os.cpu_count(), "platform": platform.platform()}),
        config=cfg.to_json(),
        steps={name: StepSection(STEPS[name].TITLE) for name in STEP_ORDER},
    )


class ReportRecorder:
    """One run's report: the sections the steps fill, the step running now, and the files it is written to."""

    def __init__(self, cfg: PilotConfig, ui, workdir: Path):
        self.ui = ui
        self.workdir = Path(workdir)
        self.started = time.perf_counter()
        self.current: str | None = None  # the step whose part is running
        self.report = new_report(cfg)

    def section(self, name: str) -> StepSection:
        return self.report.steps[name]

    @contextlib.contextmanager
    def part(self, name: str, total: int | None = None, label: str = ""):
        """Time a part of step ``name``, show its progress, settle the step, and turn a failure
        into a step error (the run goes on). Bad input, a configuration error, running out of
        memory and interrupts end the run instead; they pass through."""
        section = self.section(name)
        self.current = name
        start = time.perf_counter()
        try:
            with self.ui.progress(f"{section.title}{label}", total) as advance:
                yield advance
        except (PilotError, ConfigError, torch.OutOfMemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:
            message = first_line(exc)
            section.status = "error"
            section.summary = f"error{label}: {message}"
            section.errors.append({"where": label.strip(" ()") or name, "message": message,
                                   "traceback": traceback.format_exc(limit=8)})
            section.checks.append(Check(f"{name}{label} completed", False, None, None, message))
        else:
            self.current = None
            if section.result is not None:
                self.settle(name)
        finally:
            section.seconds += time.perf_counter() - start
            self.write()

    def settle(self, name: str) -> None:
        """Status and summary of a step from its result: failed if any check failed, unless an error."""
        section, module = self.section(name), STEPS[name]
        if section.status == "error":
            return
        override = getattr(module, "status", lambda result: None)(section.result)
        section.status = override or ("failed" if any(not c.passed for c in section.checks) else "passed")
        section.summary = module.summary(section.result)

    def settle_all(self) -> None:
        """Settle every step that has a result, then the run: failed if any step failed or errored."""
        for name, section in self.report.steps.items():
            if section.result is not None:
                self.settle(name)
        failed = any(s.status in ("failed", "error") for s in self.report.steps.values())
        self.report.status = "failed" if failed else "passed"
        self.report.exit_code = ExitCode.FAILURE if failed else ExitCode.SUCCESS

    def fail(self, kind: str, message: str, code: int, detail: str | None = None) -> None:
        """The run ends on an error: the step it reached (if any) is marked, the report records why."""
        if self.current:
            self.section(self.current).status = "error"
            self.section(self.current).summary = message
        self.report.error = ReportError(kind, message, self.current, detail)
        self.report.status = "error"
        self.report.exit_code = code

    def interrupt(self, message: str, code: int) -> None:
        """The run was interrupted during the current step (if any)."""
        self.fail("interrupted", message, code)
        self.report.status = "interrupted"
        self.report.duration_seconds = time.perf_counter() - self.started

    def json_text(self) -> str:
        return to_json_text(self.report)

    def write(self) -> None:
        """Write the report as it stands into the run's directory (published when the run ends)."""
        self.report.duration_seconds = time.perf_counter() - self.started
        try:
            write_text_whole(self.workdir / "report.json", to_json_text(self.report))
        except OSError as exc:
            raise ReportNotWritten(exc.strerror or str(exc)) from None

    def write_html(self) -> None:
        """report.html beside report.json; a rendering problem is one line, the JSON stays the record."""
        from .report.html import render_html

        try:
            (self.workdir / "report.html").write_text(render_html(self.report.to_json()))
        except Exception as exc:
            self.ui.error(f"report.html not written: {first_line(exc)}")
