"""The pilot procedure: runs the steps (``steps/``) in order, times them and keeps the report written.

Execution order differs from the report's order on purpose: cold compilation
must be measured before any other step runs a shape, and the fine-tune (which
changes the weights) runs last. Each mode (eager, compile) is one block with
the model compiled once, so compile mode pays for compilation only once. A
step's status and summary are settled as soon as a part of it completes, so a
failure later on never erases what already ran.

Exit codes (``runtime/exit_codes.py``): SUCCESS (0) every check passed; FAILURE (1) a check
failed or a step hit an error; USER_ERROR (2) bad input or an unusable environment (one-line
error, partial report); INTERNAL_ERROR (3) an internal error of the pilot itself (one line;
details in report.json); INTERRUPTED / TERMINATED (130 / 143) by SIGINT / SIGTERM (previous
report kept, partial one beside it).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import signal
import time
import traceback
from pathlib import Path

import torch

from ..runtime.errors import ConfigError, first_line
from ..runtime.exit_codes import ExitCode, interrupted_by
from ..runtime.interrupts import interrupt_signal, sigterm_as_interrupt
from ..runtime.staged_files import write_text_whole
from . import compiler, perf
from .config import PilotConfig, PilotError
from .device import is_emulated, resolve_device, set_core_capacity, use_instance
from .inputs import load_tokenizer
from .model import describe, load_reference, out_of_memory, to_device
from ..projection import get_projector, price as instance_price, write_chrome_trace
from .output import PROJECTED_TRACE, Staging, check_out
from .report import STEP_ORDER, Check, Report, StepSection, to_json_text
from .report.schema import Environment, ReportError
from .steps import STEPS, checkpoint, compilation, cost, finetune, inputs, numerics, performance, quality


class StepError(Exception):
    """A step could not complete; the pilot records it and goes on with the next step."""


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


class PilotRun:
    def __init__(self, cfg: PilotConfig, ui):
        self.cfg, self.ui = cfg, ui
        self.started = time.perf_counter()
        self.out = self.workdir = Path(cfg.out)
        self.current: str | None = None
        self.report = Report(
            created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            tool=_versions(),
            environment=Environment(device=cfg.device, device_type=cfg.device.split(":")[0],
                                    host={"cpus": os.cpu_count(), "platform": platform.platform()}),
            config=cfg.to_json(),
            steps={name: StepSection(STEPS[name].TITLE) for name in STEP_ORDER},
        )

    # ----------------------------------------------------------------- ordering, timing, writing
    def section(self, name: str) -> StepSection:
        return self.report.steps[name]

    @contextlib.contextmanager
    def part(self, name: str, total: int | None = None, label: str = ""):
        """Time a part of a step, show progress, settle the step, and turn a failure into a step error."""
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

    def write(self) -> None:
        """Write the report as it stands into the run's directory (published when the run ends)."""
        self.report.duration_seconds = time.perf_counter() - self.started
        try:
            write_text_whole(self.workdir / "report.json", to_json_text(self.report))
        except OSError as exc:
            raise ReportNotWritten(exc.strerror or str(exc)) from None

    def write_html(self) -> None:
        from .report.html import render_html

        (self.workdir / "report.html").write_text(render_html(self.report.to_json()))

    # ----------------------------------------------------------------- the run
    def run(self) -> int:
        from transformers.utils import logging as hf_logging

        try:  # before anything else: where the report goes (no report can be written if this fails)
            check_out(self.out, self.cfg.model)
            staging = Staging(self.out)
        except PilotError as exc:
            self.ui.error(str(exc))
            return ExitCode.USER_ERROR
        self.workdir = staging.dir
        hf_logging.disable_progress_bar()  # our progress bars are the console's
        try:
            with sigterm_as_interrupt():
                self._run_and_record()
        except KeyboardInterrupt as exc:
            return self._interrupted(staging, interrupt_signal(exc))
        except ReportNotWritten as exc:
            staging.discard()
            self.ui.error(f"cannot write the report in {self.out}: {exc}; the previous report is kept")
            return ExitCode.USER_ERROR
        staging.publish()
        self.ui.summary(self.report.to_json(), self.out)
        return self.report.exit_code

    def _run_and_record(self) -> None:
        try:
            self._run_steps()
            failed = any(s.status in ("failed", "error") for s in self.report.steps.values())
            self.report.status = "failed" if failed else "passed"
            self.report.exit_code = ExitCode.FAILURE if failed else ExitCode.SUCCESS
        except PilotError as exc:
            self._abort(exc.kind, str(exc), ExitCode.USER_ERROR)
        except ConfigError as exc:  # an environment variable the runtime cannot use, found at first device use
            self._abort("bad_input", str(exc), ExitCode.USER_ERROR)
        except torch.OutOfMemoryError as exc:
            err = out_of_memory(getattr(self, "device", self.cfg.device), exc)
            self._abort(err.kind, str(err), ExitCode.USER_ERROR)
        except ReportNotWritten:
            raise
        except Exception as exc:
            self._abort("internal", f"internal error: {first_line(exc)}", ExitCode.INTERNAL_ERROR,
                        traceback.format_exc(limit=12))
        self.write()
        try:
            self.write_html()
        except Exception as exc:  # the JSON is the record; a rendering problem must not hide it
            self.ui.error(f"report.html not written: {first_line(exc)}")

    def _interrupted(self, staging: Staging, signum: int) -> int:
        """Keep the previous report; the partial one goes beside it, marked with the step it reached."""
        name = signal.Signals(signum).name
        step = self.current
        message = f"interrupted by {name}" + (f" during step {step!r}" if step else "")
        if step:
            self.section(step).status = "error"
            self.section(step).summary = message
        self.report.error = ReportError("interrupted", message, step)
        self.report.status = "interrupted"
        self.report.exit_code = interrupted_by(signum)
        self.report.duration_seconds = time.perf_counter() - self.started
        path = staging.keep_interrupted(to_json_text(self.report))
        self.ui.error(f"{message}; the previous report in {self.out} is kept, the partial one is {path}")
        return self.report.exit_code

    def _abort(self, kind: str, message: str, code: int, detail: str | None = None) -> None:
        if self.current:
            self.section(self.current).status = "error"
            self.section(self.current).summary = message
        self.report.error = ReportError(kind, message, self.current, detail)
        self.report.status = "error"
        self.report.exit_code = code
        self.ui.error(message)

    def _run_steps(self) -> None:
        cfg = self.cfg
        cfg.validate()
        device = self.device = resolve_device(cfg.device)
        if cfg.instance and device.type == "neuron":
            use_instance(cfg.instance)
        if cfg.hbm_per_core_gib and device.type == "neuron":
            set_core_capacity(cfg.hbm_per_core_gib)
        self._describe_environment(device)
        self.write()

        with self.part("inputs", label=" (load model)"):
            ref = load_reference(cfg)
            self.report.model = {"source": cfg.model or "built-in tiny Llama (random weights, fixed seed)",
                                 **describe(ref)}
        if self.section("inputs").status == "error":
            raise StepError(self.section("inputs").summary)
        with self.part("inputs", label=" (prepare)"):
            tokenizer, tokenizer_note = load_tokenizer(cfg.model)
            if tokenizer_note:
                self.ui.note(tokenizer_note)
            self.section("inputs").result, known = inputs.run(cfg, ref.config.vocab_size, tokenizer, tokenizer_note,
                                                              self.workdir)
        perf.reset_peak_memory(device)
        dev = to_device(ref, device)

        comp = self.section("compilation").result = compilation.CompilationResult()
        self.section("numerics").result = numerics.NumericsResult()
        self.section("quality").result = quality.QualityResult()
        self.section("performance").result = performance.PerformanceResult()
        modes = []
        for mode in cfg.modes:
            reason = (compiler.backend_unavailable(compiler.backend_for(device)) if mode == "compile" else None)
            if reason:
                compilation.mark_unavailable(comp, mode, reason)
                self.ui.note(f"compile mode not available: {reason}")
            else:
                modes.append(mode)
        for mode in modes:
            context = (compiler.compiled_forward(dev, compiler.backend_for(device))
                       if mode == "compile" else contextlib.nullcontext())
            with context:
                self._mode_block(mode, ref, dev, device, known, tokenizer)
                if mode == "compile":  # every graph of the block: compilation, numerics, generation, timing
                    comp.modes[mode]["dynamo"] = compiler.dynamo_metrics()
        self.section("performance").result.inference_memory = perf.peak_memory(device)
        for name in ("numerics", "quality", "performance"):
            self.settle(name)

        with self.part("quality", label=" (perplexity)"):
            self.section("quality").checks += quality.run_perplexity(
                self.section("quality").result, "eager", ref, dev, known.eval_ids, device, cfg.tolerance)
        with self.part("checkpoint", label=" (save + reload in a fresh process)"):
            result, checks, fresh = checkpoint.run(dev, device, cfg, known, modes, self.workdir)
            self.section("checkpoint").checks += checks
            self.section("checkpoint").result = result
            comp.fresh_process = fresh
        self.settle("compilation")
        self._finetune(ref, dev, device, known)
        self._cost(device)

    def _mode_block(self, mode, ref, dev, device, known, tokenizer) -> None:
        cfg = self.cfg
        with self.part("compilation", total=2 * len(known.batches), label=f" ({mode})") as advance:
            self.section("compilation").checks += compilation.run(
                self.section("compilation").result, mode, dev, device, known.batches, advance)
        with self.part("numerics", label=f" ({mode})"):
            self.section("numerics").checks += numerics.run(
                self.section("numerics").result, mode, ref, dev, known.batches, device, cfg.tolerance,
                hooks=cfg.hidden_states and mode == "eager")
        with self.part("quality", label=f" (greedy, {mode})"):
            # Eager: Transformers' generate, the users' path. Compile: the timed static-cache loop,
            # whose graphs the performance step reuses (generate would compile its own on top).
            greedy = perf.greedy_static if mode == "compile" else quality.greedy_tokens
            self.section("quality").checks += quality.run_generation(
                self.section("quality").result, mode, ref, dev, known.batches[min(known.batches)], cfg.gen_tokens,
                device, cfg.tolerance, tokenizer, greedy)
        with self.part("performance", total=cfg.iters * len(known.batches), label=f" ({mode})") as advance:
            performance.run(self.section("performance").result, mode, dev, known.batches, cfg.gen_tokens,
                            cfg.iters, device, advance)

    def _describe_environment(self, device: torch.device) -> None:
        env = self.report.environment
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

    def _finetune(self, ref, dev, device, known) -> None:
        steps = self.cfg.train_steps
        if steps == 0:
            self.settle("finetune")
            return
        perf.reset_peak_memory(device)
        rows = known.batches[min(known.batches)]
        probe = perf.probe_for(device)
        with self.part("finetune", total=2 * steps, label=f" ({steps} steps, CPU then device)") as advance:
            mark = probe.mark() if probe else None
            result, checks = finetune.run(ref, dev, rows, steps, device, self.cfg.tolerance,
                                          perf.synchronizer(device), advance, self.cfg.optimizer,
                                          self.cfg.lr_schedule)
            if probe:
                self._project_training(probe, mark, steps, len(rows))
            self.section("finetune").checks += checks
            self.section("finetune").result = result
            measured = self.section("performance").result
            measured.train_samples_per_second = result.train_samples_per_second
            measured.training_memory = perf.peak_memory(device)

    def _project_training(self, probe, mark, steps: int, rows: int) -> None:
        """Projected fine-tune figures, where its device time goes, and its timeline as a trace."""
        window = probe.since(mark)
        measured = self.section("performance").result
        measured.projected_training = performance.project_training(window, steps, rows, get_projector(),
                                                                   self.cfg.price_per_hour)
        measured.projection = {"label": "projected", "step": window.step.to_dict(),
                               "eager_by_engine": window.eager_by_engine, "eager": {"by_op": window.eager_by_op}}
        write_chrome_trace(get_projector(), probe.sequence(mark), self.workdir / PROJECTED_TRACE)

    def _cost(self, device) -> None:
        with self.part("cost"):
            neuron = device.type == "neuron"
            instance = torch.neuron.topology().profile.name if neuron else None
            self.section("cost").result = cost.run(
                cost.price_for(device.type, self.cfg.price_per_hour, instance), self.report.environment.time_basis,
                self.cfg.gen_tokens, device.type, self.section("compilation").result,
                self.section("performance").result, self.section("finetune").result,
                projector=get_projector() if neuron else None, user_price=self.cfg.price_per_hour)


def run_pilot(cfg: PilotConfig, ui) -> int:
    """Run the pilot with ``ui`` (a :class:`console.PilotConsole`); returns the exit code."""
    return PilotRun(cfg, ui).run()
