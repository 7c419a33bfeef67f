"""The pilot procedure: sets up the device, walks the steps' phases (``steps/__init__.py``) with one
context, and ends the run with the right exit code and files.

Execution order differs from the report's order on purpose: cold compilation must be
measured before any other step runs a shape, and the fine-tune (which changes the weights)
runs last but cost. Each mode (eager, compile) is one block with the model compiled once,
so compile mode pays for compilation only once. The report (``recorder.py``) settles each
step as its parts complete, so a failure later on never erases what already ran.

Exit codes (``runtime/exit_codes.py``): SUCCESS (0) every check passed; FAILURE (1) a check
failed or a step hit an error; USER_ERROR (2) bad input or an unusable environment (one-line
error); INTERNAL_ERROR (3) an internal error of the pilot itself (one line; details in the
report); INTERRUPTED / TERMINATED (130 / 143) by SIGINT / SIGTERM. A run that ends on an error
or an interrupt keeps the last complete run's files and writes its report beside them
(``output.py``).
"""
from __future__ import annotations

import contextlib
import signal
import traceback

import torch

from ..runtime.errors import ConfigError, first_line
from ..runtime.exit_codes import ExitCode, interrupted_by
from ..runtime.interrupts import interrupt_signal, sigterm_as_interrupt
from . import compiler, perf
from .config import PilotConfig, PilotError
from .context import PilotContext
from .device import is_emulated, resolve_device, set_core_capacity, use_instance
from .model import out_of_memory, to_device
from ..projection import price as instance_price
from .output import REPORT, Staging, check_out
from .recorder import ReportNotWritten, ReportRecorder
from .steps import AFTER_MODES, BEFORE_MODES, EACH_MODE, STEPS, compilation, cost


class StepError(Exception):
    """A step every later one depends on could not complete: the run ends with an error."""


class PilotProcedure:
    """One run of the pilot: its output directory, its report and the steps in order."""

    def __init__(self, cfg: PilotConfig, ui, environment_error: ConfigError | None = None):
        self.cfg, self.ui = cfg, ui
        self.out = cfg.out
        self.environment_error = environment_error  # found before the run: it is recorded and ends it

    def run(self) -> int:
        from transformers.utils import logging as hf_logging

        try:  # before anything else: where the report goes (no report can be written if this fails)
            check_out(self.out, self.cfg.model)
            staging = Staging(self.out)
        except PilotError as exc:
            self.ui.error(str(exc))
            return ExitCode.USER_ERROR
        recorder = ReportRecorder(self.cfg, self.ui, staging.dir)
        hf_logging.disable_progress_bar()  # our progress bars are the console's
        try:
            with sigterm_as_interrupt():
                self._run_and_record(recorder)
        except KeyboardInterrupt as exc:
            return self._interrupted(recorder, staging, interrupt_signal(exc))
        except ReportNotWritten as exc:
            staging.discard()
            self.ui.error(f"cannot write the report in {self.out}: {exc}; the previous report is kept")
            return ExitCode.USER_ERROR
        if recorder.report.status == "error":
            files = staging.keep_failed()
            self.ui.summary(recorder.report.to_json(), files, kept=(self.out / REPORT).exists())
        else:
            self.ui.summary(recorder.report.to_json(), staging.publish())
        return recorder.report.exit_code

    def _run_and_record(self, recorder: ReportRecorder) -> None:
        ctx = PilotContext(self.cfg, self.ui, recorder)
        try:
            self._run_steps(ctx)
            recorder.settle_all()
        except PilotError as exc:
            self._fail(recorder, exc.kind, str(exc), ExitCode.USER_ERROR)
        except ConfigError as exc:  # an environment variable the runtime cannot use
            self._fail(recorder, "configuration", str(exc), ExitCode.USER_ERROR)
        except torch.OutOfMemoryError as exc:
            err = out_of_memory(ctx.device or self.cfg.device, exc)
            self._fail(recorder, err.kind, str(err), ExitCode.USER_ERROR)
        except ReportNotWritten:
            raise
        except Exception as exc:
            self._fail(recorder, "internal", f"internal error: {first_line(exc)}", ExitCode.INTERNAL_ERROR,
                       traceback.format_exc(limit=12))
        recorder.write()
        recorder.write_html()

    def _fail(self, recorder: ReportRecorder, kind: str, message: str, code: int, detail: str | None = None) -> None:
        recorder.fail(kind, message, code, detail)
        self.ui.error(message)

    def _interrupted(self, recorder: ReportRecorder, staging: Staging, signum: int) -> int:
        """Keep the previous report; the partial one goes beside it, marked with the step it reached."""
        step = recorder.current
        message = f"interrupted by {signal.Signals(signum).name}" + (f" during step {step!r}" if step else "")
        recorder.interrupt(message, interrupted_by(signum))
        path = staging.keep_interrupted(recorder.json_text())
        self.ui.error(f"{message}; the previous report in {self.out} is kept, the partial one is {path}")
        return recorder.report.exit_code

    # ----------------------------------------------------------------- the steps, phase by phase
    def _run_steps(self, ctx: PilotContext) -> None:
        cfg = self.cfg
        if self.environment_error is not None:
            raise self.environment_error
        cfg.validate()
        device = ctx.device = resolve_device(cfg.device)
        if cfg.instance and device.type == "neuron":
            use_instance(cfg.instance)
        if cfg.hbm_per_core_gib and device.type == "neuron":
            set_core_capacity(cfg.hbm_per_core_gib)
        self._describe_environment(ctx)
        ctx.recorder.write()

        for name in BEFORE_MODES:
            self._call(ctx, name, "run_once")
            if ctx.recorder.section(name).status == "error":
                raise StepError(ctx.recorder.section(name).summary)
        perf.reset_peak_memory(device)
        ctx.model = to_device(ctx.reference, device)

        for name in EACH_MODE:
            ctx.recorder.section(name).result = STEPS[name].RESULT()
        ctx.modes = self._available_modes(ctx)
        for mode in ctx.modes:
            context = (compiler.compiled_forward(ctx.model, compiler.backend_for(device))
                       if mode == "compile" else contextlib.nullcontext())
            with context:
                for name in EACH_MODE:
                    self._call(ctx, name, "run_mode", mode)
                for name in EACH_MODE:  # the block's totals: what every step of the block compiled
                    if hasattr(STEPS[name], "end_mode"):
                        self._call(ctx, name, "end_mode", mode)
        for name in AFTER_MODES:
            self._call(ctx, name, "run_once")

    @staticmethod
    def _call(ctx: PilotContext, name: str, phase: str, *args) -> None:
        ctx.step = name
        try:
            getattr(STEPS[name], phase)(ctx, *args)
        finally:
            ctx.step = ""

    def _available_modes(self, ctx: PilotContext) -> tuple[str, ...]:
        """The modes that can run here; the others are marked on the compilation step, with why."""
        modes = []
        for mode in self.cfg.modes:
            reason = (compiler.backend_unavailable(compiler.backend_for(ctx.device)) if mode == "compile" else None)
            if reason:
                compilation.mark_unavailable(ctx.result("compilation"), mode, reason)
                self.ui.note(f"compile mode not available: {reason}")
            else:
                modes.append(mode)
        return tuple(modes)

    def _describe_environment(self, ctx: PilotContext) -> None:
        device = ctx.device
        env = ctx.recorder.report.environment
        env.device, env.device_type, env.emulated = str(device), device.type, is_emulated(device)
        env.time_basis = cost.time_basis(device.type, env.emulated)
        if device.type == "neuron":
            topo = torch.neuron.topology()
            p = topo.profile
            rate = cost.price_for(device.type, self.cfg.price_per_hour, p.name)
            env.instance = {"name": p.name, "family": p.family, "logical_nc_config": topo.lnc,
                            "visible_cores": topo.device_count,
                            "hbm_per_core_bytes": torch.neuron.get_device_properties(device).total_memory,
                            "hbm_override_gib": self.cfg.hbm_per_core_gib,
                            "price_per_hour_usd": rate.usd_per_hour, "price_source": rate.source,
                            "price": instance_price(p.name, self.cfg.price_per_hour).to_dict(),
                            "figures_confirmed": p.confirmed}


def run_pilot(cfg: PilotConfig, ui, environment_error: ConfigError | None = None) -> int:
    """Run the pilot with ``ui`` (a :class:`console.PilotConsole`); returns the exit code. With an
    ``environment_error`` (an unusable setting found before the run) the run only records it."""
    return PilotProcedure(cfg, ui, environment_error).run()
