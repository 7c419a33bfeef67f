"""Runs the pilot's steps in order and keeps ``report.json``/``report.html`` current.

Execution order differs from the report's order on purpose: cold compilation
must be measured before any other step runs a shape, and the fine-tune (which
changes the weights) runs last. Each mode (eager, compile) is one block with
the model compiled once, so compile mode pays for compilation only once.

Exit codes: 0 every check passed; 1 a check failed or a step hit an error;
2 bad input or an unusable environment (one-line error, partial report);
3 an internal error of the pilot itself (one line; details in report.json).
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from . import checks, compilation, cost, perf
from .config import PilotConfig, PilotError
from .device import is_emulated, resolve_device, set_core_capacity, use_instance
from .inputs import build_inputs, load_inputs, load_tokenizer
from .model import describe, load_reference, out_of_memory, to_device
from .report import SCHEMA_NAME, SCHEMA_VERSION, STEP_ORDER, validate_report

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

STEP_TITLES = {
    "inputs": "Known inputs",
    "numerics": "Numerical behaviour vs CPU",
    "quality": "Output quality vs CPU",
    "finetune": "Fine-tune loss curve vs CPU",
    "checkpoint": "Checkpoint round trip (fresh process)",
    "compilation": "Compilation",
    "performance": "Performance",
    "cost": "Cost",
}
WORKER_TIMEOUT_SECONDS = 1800


class StepError(Exception):
    """A step could not complete; the pilot records it and goes on with the next step."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


class PilotRun:
    def __init__(self, cfg: PilotConfig, ui):
        self.cfg, self.ui = cfg, ui
        self.started = time.perf_counter()
        self.out = Path(cfg.out)
        self.report = {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "status": "error",
            "exit_code": EXIT_INTERNAL,
            "error": None,
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "duration_seconds": 0.0,
            "tool": self._versions(),
            "environment": {"device": cfg.device, "device_type": cfg.device.split(":")[0],
                            "emulated": False, "time_basis": "not measured", "instance": None,
                            "host": {"cpus": os.cpu_count(), "platform": platform.platform()}},
            "config": cfg.to_json(),
            "model": None,
            "steps": {name: {"title": STEP_TITLES[name], "status": "not_run", "seconds": 0.0,
                             "summary": "", "checks": [], "data": {}} for name in STEP_ORDER},
            "summary": {"checks_total": 0, "checks_passed": 0, "failed_checks": []},
        }

    @staticmethod
    def _versions() -> dict:
        import torch_neuronx

        try:
            import transformers

            tf_version = transformers.__version__
        except ImportError:
            tf_version = None
        return {"torchneuron": torch_neuronx.__version__, "torch": torch.__version__,
                "transformers": tf_version, "python": platform.python_version()}

    # ----------------------------------------------------------------- bookkeeping
    def step(self, name: str) -> dict:
        return self.report["steps"][name]

    @contextlib.contextmanager
    def timed(self, name: str, total: int | None = None, label: str = ""):
        """Time a (part of a) step, show progress, and turn a failure into a step error."""
        step = self.step(name)
        self._current = name
        start = time.perf_counter()
        try:
            with self.ui.progress(f"{step['title']}{label}", total) as advance:
                yield advance
        except (PilotError, torch.OutOfMemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:
            step["status"] = "error"
            step["summary"] = f"error{label}: {_first_line(exc)}"
            step["data"].setdefault("errors", []).append(
                {"where": label.strip(" ()") or name, "message": _first_line(exc),
                 "traceback": traceback.format_exc(limit=8)})
            step["checks"].append(checks.check(f"{name}{label} completed", False, None, None, _first_line(exc)))
        else:
            self._current = None
        finally:
            step["seconds"] += time.perf_counter() - start
            self.write()

    def add_checks(self, name: str, new_checks: list[dict]) -> None:
        self.step(name)["checks"].extend(new_checks)

    def settle(self, name: str, summary: str, status: str | None = None) -> None:
        """Final status of a step: failed if any check failed, unless already an error."""
        step = self.step(name)
        if step["status"] == "error":
            return
        step["status"] = status or ("failed" if any(not c["passed"] for c in step["checks"]) else "passed")
        step["summary"] = summary

    def write(self) -> None:
        """Write the report as it stands: a crash or a bad input still leaves one on disk."""
        rep = self.report
        rep["duration_seconds"] = time.perf_counter() - self.started
        all_checks = [(n, c) for n, s in rep["steps"].items() for c in s["checks"]]
        rep["summary"] = {
            "checks_total": len(all_checks),
            "checks_passed": sum(c["passed"] for _, c in all_checks),
            "failed_checks": [f"{n}: {c['name']}" for n, c in all_checks if not c["passed"]],
            **{k: v for k, v in rep["summary"].items() if k not in ("checks_total", "checks_passed", "failed_checks")},
        }
        validate_report(rep)
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.out / "report.json.tmp"
        tmp.write_text(json.dumps(rep, indent=2, default=str))
        tmp.replace(self.out / "report.json")

    def write_html(self) -> None:
        from .report.html import render_html

        (self.out / "report.html").write_text(render_html(self.report))

    # ----------------------------------------------------------------- the run
    def run(self) -> int:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our progress bars are the console's
        try:
            self._run_steps()
            failed = any(s["status"] in ("failed", "error") for s in self.report["steps"].values())
            self.report["status"] = "failed" if failed else "passed"
            self.report["exit_code"] = EXIT_CHECK_FAILED if failed else EXIT_OK
        except PilotError as exc:
            self._abort(exc.kind, str(exc), EXIT_BAD_INPUT)
        except torch.OutOfMemoryError as exc:
            err = out_of_memory(self._device if hasattr(self, "_device") else self.cfg.device, exc)
            self._abort(err.kind, str(err), EXIT_BAD_INPUT)
        except Exception as exc:
            self._abort("internal", f"internal error: {_first_line(exc)}", EXIT_INTERNAL,
                        traceback.format_exc(limit=12))
        self.write()
        try:
            self.write_html()
        except Exception as exc:  # the JSON is the record; a rendering problem must not hide it
            self.ui.error(f"report.html not written: {_first_line(exc)}")
        self.ui.summary(self.report, self.out)
        return self.report["exit_code"]

    def _abort(self, kind: str, message: str, code: int, detail: str | None = None) -> None:
        running = getattr(self, "_current", None)
        if running:
            self.step(running)["status"] = "error"
            self.step(running)["summary"] = message
        self.report["error"] = {"kind": kind, "message": message, "step": running}
        if detail:
            self.report["error"]["traceback"] = detail
        self.report["status"] = "error"
        self.report["exit_code"] = code
        self.ui.error(message)

    def _run_steps(self) -> None:
        cfg = self.cfg
        self._current = "inputs"
        cfg.validate()
        device = self._device = resolve_device(cfg.device)
        if cfg.instance and device.type == "neuron":
            use_instance(cfg.instance)
        if cfg.hbm_per_core_gib and device.type == "neuron":
            set_core_capacity(cfg.hbm_per_core_gib)
        self._describe_environment(device)
        self.write()

        with self.timed("inputs", label=" (load model)"):
            ref = load_reference(cfg)
            self.report["model"] = {"source": cfg.model or "built-in tiny Llama (random weights, fixed seed)",
                                    **describe(ref)}
        if self.step("inputs")["status"] == "error":
            raise StepError(self.step("inputs")["summary"])
        self._inputs(ref)
        perf.reset_peak_memory(device)
        dev = to_device(ref, device)

        modes = self._available_modes(device)
        for mode in modes:
            context = (compilation.compiled_forward(dev, compilation.backend_for(device))
                       if mode == "compile" else contextlib.nullcontext())
            with context:
                self._compilation(mode, dev, device)
                self._numerics(mode, ref, dev, device)
                self._generation(mode, ref, dev, device)
                self._performance(mode, dev, device)
                if mode == "compile":  # every graph of the block: compilation, numerics, generation, timing
                    self.step("compilation")["data"]["modes"][mode]["dynamo"] = compilation.dynamo_metrics()
        self.step("performance")["data"]["inference_memory"] = perf.peak_memory(device)
        self._perplexity(ref, dev, device)
        self._checkpoint(dev, device, modes)
        self._finetune(ref, dev, device)
        self._settle_all(modes)
        self._cost(device)

    def _describe_environment(self, device: torch.device) -> None:
        env = self.report["environment"]
        emulated = is_emulated(device)
        env.update(device=str(device), device_type=device.type, emulated=emulated,
                   time_basis=cost.time_basis(device.type, emulated))
        if device.type == "neuron":
            topo = torch.neuron.topology()
            p = topo.profile
            env["instance"] = {"name": p.name, "family": p.family, "logical_nc_config": topo.lnc,
                               "visible_cores": topo.device_count,
                               "hbm_per_core_bytes": torch.neuron.get_device_properties(device).total_memory,
                               "hbm_override_gib": self.cfg.hbm_per_core_gib,
                               "price_per_hour_usd": p.price_per_hour, "price_source": p.price_source,
                               "figures_confirmed": p.confirmed}

    def _available_modes(self, device) -> list[str]:
        data = self.step("compilation")["data"].setdefault("modes", {})
        modes = []
        for mode in self.cfg.modes:
            reason = compilation.backend_unavailable(compilation.backend_for(device)) if mode == "compile" else None
            if reason:
                data[mode] = {"available": False, "reason": reason}
                self.ui.note(f"compile mode not available: {reason}")
            else:
                modes.append(mode)
        return modes

    def _inputs(self, ref) -> None:
        cfg = self.cfg
        with self.timed("inputs", label=" (prepare)"):
            tokenizer = load_tokenizer(cfg.model)
            if cfg.inputs:
                known = load_inputs(cfg.inputs, ref.config.vocab_size)
                origin = f"loaded from {cfg.inputs}"
            else:
                known = build_inputs(tokenizer, cfg.batch_size, cfg.seq_lens, eval_len=max(cfg.seq_lens))
                origin = "built from the built-in text"
                if any(i >= ref.config.vocab_size for rows in known.batches.values() for r in rows for i in r):
                    raise PilotError("bad_input", "the tokenizer produces ids outside the model's vocabulary")
            path = self.out / "inputs.json"
            self.out.mkdir(parents=True, exist_ok=True)
            known.save(path)
            self.known, self.tokenizer = known, tokenizer
            self.step("inputs")["data"] = {
                "file": path.name, "origin": origin, "tokenizer": known.tokenizer,
                "batch_size": known.batch_size, "seq_lens": known.seq_lens, "eval_tokens": len(known.eval_ids),
                "prompts": known.prompts,
            }
        self.settle("inputs", f"{known.batch_size} × {known.seq_lens} tokens {origin}; saved to {path.name} "
                              "(reuse with --inputs)")

    def _compilation(self, mode: str, dev, device) -> None:
        """Cold first call per shape (compiles), then a warm call (must not compile again)."""
        data = self.step("compilation")["data"]["modes"].setdefault(mode, {"available": True})
        data["backend"] = compilation.backend_for(device) if mode == "compile" else None
        sync = perf.synchronizer(device)
        shapes = {}
        with self.timed("compilation", total=2 * len(self.known.batches), label=f" ({mode})") as advance:
            compilation.reset_dynamo()
            for length, rows in sorted(self.known.batches.items()):
                ids = torch.tensor(rows, device=device)
                entry = {}
                for phase in ("cold", "warm"):
                    compilation.reset_fidelity()
                    graphs_before = compilation.dynamo_metrics()["dynamo_unique_graphs"]
                    sync()
                    start = time.perf_counter()
                    with torch.no_grad():
                        dev(input_ids=ids, use_cache=False)
                    sync()
                    fid = compilation.fidelity_metrics(device)
                    entry[phase] = {
                        "seconds": time.perf_counter() - start,
                        "new_graphs": compilation.dynamo_metrics()["dynamo_unique_graphs"] - graphs_before,
                        "kernel_compilations": fid["kernels"]["misses"] if fid["available"] else None,
                        "kernel_signatures": fid["kernels"]["unique_signatures"] if fid["available"] else None,
                        "kernel_disk_hits": fid["kernels"]["disk_hits"] if fid["available"] else None,
                        "estimated_compile_seconds": fid.get("estimated_compile_seconds"),
                    }
                    advance()
                shapes[str(length)] = entry
                warm = entry["warm"]
                stable = (warm["new_graphs"] == 0 if mode == "compile"
                          else warm["kernel_compilations"] in (0, None))
                what = "graphs" if mode == "compile" else "kernel compilations"
                self.add_checks("compilation", [checks.check(
                    f"{mode}: repeat call seq={length} compiles nothing new", stable,
                    warm["new_graphs"] if mode == "compile" else warm["kernel_compilations"], 0,
                    f"new {what} on the second call of the same shape")])
            data["shapes"] = shapes
            data["fidelity"] = compilation.fidelity_metrics(device)
            data["dynamo"] = compilation.dynamo_metrics() if mode == "compile" else None

    def _numerics(self, mode, ref, dev, device) -> None:
        with self.timed("numerics", label=f" ({mode})"):
            data, new = checks.numerics(ref, dev, self.known.batches, device, self.cfg.tolerance,
                                        hooks=self.cfg.hidden_states and mode == "eager", label=mode)
            self.step("numerics")["data"][mode] = data
            self.add_checks("numerics", new)

    def _generation(self, mode, ref, dev, device) -> None:
        with self.timed("quality", label=f" (greedy, {mode})"):
            rows = self.known.batches[min(self.known.batches)]
            # Eager: Transformers' generate, the users' path. Compile: the timed static-cache loop,
            # whose graphs the performance step reuses (generate would compile its own on top).
            greedy = perf.greedy_static if mode == "compile" else checks.greedy_tokens
            data, new = checks.generation(ref, dev, rows, self.cfg.gen_tokens, device, self.cfg.tolerance,
                                          self.tokenizer, mode, greedy)
            self.step("quality")["data"].setdefault("generation", {})[mode] = data
            self.add_checks("quality", new)

    def _perplexity(self, ref, dev, device) -> None:
        with self.timed("quality", label=" (perplexity)"):
            data, new = checks.perplexity(ref, dev, self.known.eval_ids, device, self.cfg.tolerance, "eager")
            self.step("quality")["data"]["perplexity"] = data
            self.add_checks("quality", new)

    def _performance(self, mode, dev, device) -> None:
        total = self.cfg.iters * len(self.known.batches)
        with self.timed("performance", total=total, label=f" ({mode})") as advance:
            data = perf.measure_generation(dev, self.known.batches, self.cfg.gen_tokens, self.cfg.iters,
                                           device, advance)
            self.step("performance")["data"].setdefault("generation", {})[mode] = data

    def _checkpoint(self, dev, device, modes) -> None:
        step = self.step("checkpoint")
        with self.timed("checkpoint", label=" (save + reload in a fresh process)"):
            ckpt = self.out / "checkpoint"
            start = time.perf_counter()
            dev.save_pretrained(ckpt)
            step["data"]["save_seconds"] = time.perf_counter() - start
            step["data"]["directory"] = ckpt.name
            result = self._fresh_process(ckpt, device, modes)
            first = min(self.known.batches)
            with torch.no_grad():
                expected = dev(input_ids=torch.tensor(self.known.batches[first], device=device),
                               use_cache=False).logits.to("cpu")
            reloaded = torch.load(self.out / "reloaded_logits.pt")
            (self.out / "reloaded_logits.pt").unlink()
            diff = (reloaded.float() - expected.float()).abs().max().item()
            step["data"].update(load_seconds=result["load_seconds"], max_abs_difference=diff,
                                compared=f"logits of the seq={first} batch")
            self.add_checks("checkpoint", [checks.check(
                "reloaded checkpoint gives identical logits", diff == 0.0, diff, 0.0,
                "save_pretrained on the device, from_pretrained on the device in a new process")])
            self.step("compilation")["data"]["fresh_process"] = result["modes"]

    def _fresh_process(self, ckpt: Path, device, modes) -> dict:
        request = {"checkpoint": str(ckpt), "device": str(device), "dtype": self.cfg.dtype,
                   "attn": self.cfg.attn_implementation, "hbm_per_core_gib": self.cfg.hbm_per_core_gib,
                   "batches": {str(k): v for k, v in self.known.batches.items()}, "modes": modes,
                   "logits_out": str(self.out / "reloaded_logits.pt")}
        req_path, res_path = self.out / "worker-request.json", self.out / "worker-result.json"
        req_path.write_text(json.dumps(request))
        try:
            proc = subprocess.run([sys.executable, "-m", "torch_neuronx.pilot.worker", str(req_path), str(res_path)],
                                  capture_output=True, text=True, timeout=WORKER_TIMEOUT_SECONDS)
            if proc.returncode != 0:
                lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
                raise StepError(f"fresh process failed (exit {proc.returncode}): {lines[-1] if lines else ''}")
            return json.loads(res_path.read_text())
        finally:
            req_path.unlink(missing_ok=True)
            res_path.unlink(missing_ok=True)

    def _finetune(self, ref, dev, device) -> None:
        steps = self.cfg.train_steps
        if steps == 0:
            self.settle("finetune", "skipped (--train-steps 0)", status="skipped")
            return
        perf.reset_peak_memory(device)
        rows = self.known.batches[min(self.known.batches)]
        with self.timed("finetune", total=2 * steps, label=f" ({steps} steps, CPU then device)") as advance:
            data, new = checks.finetune(ref, dev, rows, steps, device, self.cfg.tolerance,
                                        perf.synchronizer(device), advance)
            self.step("finetune")["data"] = data
            self.add_checks("finetune", new)
            perfdata = self.step("performance")["data"]
            perfdata["train_samples_per_second"] = data["train_samples_per_second"]
            perfdata["training_memory"] = perf.peak_memory(device)

    def _settle_all(self, modes) -> None:
        num = self.step("numerics")["data"]
        worst = max((e["max_abs_error"] for m in modes for e in num.get(m, {}).get("logits", {}).values()),
                    default=None)
        if worst is None:
            self.settle("numerics", "no mode ran", status="not_available")
        else:
            self.settle("numerics", f"max |logits error| {worst:.2e} vs CPU (atol {self.cfg.tolerance.atol})")
        q = self.step("quality")["data"]
        agreement = {m: g["token_agreement"] for m, g in q.get("generation", {}).items()}
        ppl = q.get("perplexity", {})
        self.settle("quality", ", ".join(f"{m}: {a:.0%} greedy tokens match" for m, a in agreement.items())
                    + (f"; loss {ppl['device_loss']:.4f} vs CPU {ppl['cpu_loss']:.4f}" if ppl else ""))
        ft = self.step("finetune")
        if ft["status"] != "skipped" and ft["data"]:
            self.settle("finetune", f"{ft['data']['steps']} steps, final loss {ft['data']['device_loss'][-1]:.4f} "
                                    f"(CPU {ft['data']['cpu_loss'][-1]:.4f}), "
                                    f"{ft['data']['train_samples_per_second']:.1f} samples/s")
        ck = self.step("checkpoint")["data"]
        self.settle("checkpoint", f"reloaded in a fresh process: max |Δ logits| = {ck.get('max_abs_difference')}")
        self._settle_compilation(modes)
        gen = self.step("performance")["data"].get("generation", {})
        parts = [f"{m}: TTFT p50 {g['ttft_seconds']['p50'] * 1e3:.1f} ms"
                 + (f", per token p50 {g['per_token_seconds']['p50'] * 1e3:.1f} ms"
                    if g["per_token_seconds"]["p50"] is not None else "")
                 for m, g in gen.items()]
        self.settle("performance", "; ".join(parts) or "no mode ran", status=None if parts else "not_available")

    def _settle_compilation(self, modes) -> None:
        data = self.step("compilation")["data"]
        parts = []
        for mode in modes:
            shapes = data["modes"].get(mode, {}).get("shapes", {})
            if not shapes:
                continue
            cold = sum(s["cold"]["seconds"] for s in shapes.values())
            warm = sum(s["warm"]["seconds"] for s in shapes.values())
            fresh = data.get("fresh_process", {}).get(mode, {}).get("first_call_seconds", {})
            part = f"{mode}: cold {cold:.2f}s vs steady {warm:.3f}s over {len(shapes)} shapes"
            if fresh:
                part += f", fresh process first calls {sum(fresh.values()):.2f}s"
            parts.append(part)
        for mode, entry in data.get("modes", {}).items():
            if not entry.get("available", True):
                parts.append(f"{mode}: not available")
        self.settle("compilation", "; ".join(parts))

    def _cost(self, device) -> None:
        cfg = self.cfg
        with self.timed("cost"):
            profile = torch.neuron.topology().profile if device.type == "neuron" else None
            price, source = cost.price_for(device.type, cfg.price_per_hour, profile)
            comp = self.step("compilation")["data"]
            eager_shapes = comp.get("modes", {}).get("eager", {}).get("shapes", {})
            estimate = (sum(s["cold"]["estimated_compile_seconds"] or 0.0 for s in eager_shapes.values())
                        if eager_shapes and device.type == "neuron" else None)
            per_kernel = (comp["modes"]["eager"].get("fidelity") or {}).get("compile_seconds_per_kernel_estimate")
            empty_cache_estimate = (sum(s["cold"]["kernel_signatures"] or 0 for s in eager_shapes.values()) * per_kernel
                                    if estimate is not None and per_kernel else None)
            cold_overhead = sum(s["cold"]["seconds"] - s["warm"]["seconds"]
                                for m in comp.get("modes", {}).values() for s in m.get("shapes", {}).values())
            data = cost.job_costs(price, cfg.gen_tokens, self.step("performance")["data"].get("generation", {}),
                                  self.step("finetune")["data"] or None, estimate, cold_overhead,
                                  empty_cache_estimate)
            data.update(price_per_hour_usd=price, price_source=source,
                        time_basis=self.report["environment"]["time_basis"])
            self.step("cost")["data"] = data
        if price is None:
            self.settle("cost", source, status="not_available")
        else:
            jobs = data["generation"]
            self.settle("cost", "; ".join(f"{m}: ${j['cost_usd']:.6f} per request" for m, j in jobs.items())
                        + f" at ${price:.2f}/h ({self.report['environment']['time_basis'].split(':')[0]})")


def run_pilot(cfg: PilotConfig, ui) -> int:
    """Run the pilot with ``ui`` (a :class:`console.PilotConsole`); returns the exit code."""
    return PilotRun(cfg, ui).run()
