"""Run probes in child processes, several at once, surviving crashes and hangs.

Each of ``jobs`` threads owns one worker process (:mod:`.probe_process`) and feeds it
architectures one at a time. A worker that dies (segfault, abort, OOM kill) or
exceeds the per-architecture timeout is killed and replaced; the architecture
is recorded as crashed in the stage it had reached, and the sweep goes on.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

from .compiled import ATTENTION, OURS, SHARED
from .popular import POPULAR_TEXT_GENERATION
from .probe import CHECKS
from ..testing.child_process import ChildFailed, ChildProcess
from ..testing.tiny_models import TinySize

READY_TIMEOUT_SECONDS = 300


class ProbeWorker:
    """One child process (:mod:`.probe_process`) probing architectures one at a time; replaced after a crash."""

    def __init__(self, device: str, log_path: Path, lower: bool = True, compiled: bool = False,
                 layers: int = TinySize().layers):
        argv = ("--device", device, "--layers", str(layers)) + (() if lower else ("--no-lowering",)) + \
            (("--compiled",) if compiled else ())
        self.child = ChildProcess("torch_neuronx.coverage.probe_process", argv, log_path,
                                  ready_timeout=READY_TIMEOUT_SECONDS)

    def probe(self, model_type: str, timeout: float) -> dict:
        phase, partial = "start", None

        def on_event(event: dict) -> None:
            nonlocal phase, partial
            phase = event.get("phase", phase)
            partial = event.get("partial", partial)

        start = time.monotonic()
        try:
            result = self.child.request({"model_type": model_type}, timeout, on_event)
        except ChildFailed as exc:
            what = {"timeout": str(exc), "exited": f"crashed ({exc})"}.get(exc.reason, f"failed ({exc})")
            message = f"worker {what} during the {phase} stage"
            if partial is not None:  # the eager checks had finished: only the compiled columns are lost
                result = {**partial, "compiled": {"crashed": True, "error": message, "status": "ours_fail"}}
            else:
                result = crashed_result(model_type, phase, message)
        result["seconds"] = round(time.monotonic() - start, 1)  # host time of this architecture
        return result

    def stop(self) -> None:
        self.child.stop()


def crashed_result(model_type: str, phase: str, message: str) -> dict:
    """A crash on the CPU (or while building) is not held against the device."""
    on_device = phase == "device"
    failed = {"ok": False, "error": message}
    return {"model_type": model_type, "crashed": True, "error": message,
            "status": "device_fail" if on_device else ("build_failed" if phase in ("start", "build") else "cpu_fail"),
            "cpu": {c: ({"ok": True, "error": None} if on_device else failed) for c in CHECKS},
            "device_checks": {c: failed for c in CHECKS}}


class ResultLog:
    """Every finished architecture as one JSON line, written when it finishes, so that a sweep that
    was stopped resumes with the architectures not yet done (``--resume``). Lines written with other
    options (device, lowering, compiled checks, layers) are not reused."""

    def __init__(self, path: Path, options: dict, resume: bool):
        self.path, self.options, self.lock = path, options, threading.Lock()
        self.done = self._load() if resume else {}
        if not resume:
            path.write_text("")

    def _load(self) -> dict[str, dict]:
        done: dict[str, dict] = {}
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a sweep killed while writing it
            if entry.get("options") == self.options:
                done[entry["result"]["model_type"]] = entry["result"]
        return done

    def add(self, result: dict) -> None:
        with self.lock, self.path.open("a") as f:
            f.write(json.dumps({"options": self.options, "result": result}) + "\n")
            self.done[result["model_type"]] = result


def run_sweep(model_types: list[str], device: str, jobs: int, timeout: float, log_dir: Path,
              on_result=lambda result: None, lower: bool = True, compiled: bool = False,
              layers: int = TinySize().layers) -> list[dict]:
    todo: queue.Queue = queue.Queue()
    for name in model_types:
        todo.put(name)
    results: dict[str, dict] = {}
    lock = threading.Lock()

    def drain(index: int) -> None:
        worker = ProbeWorker(device, log_dir / f"coverage-worker-{index}.log", lower, compiled, layers)
        try:
            while True:
                try:
                    name = todo.get_nowait()
                except queue.Empty:
                    return
                result = worker.probe(name, timeout)
                with lock:
                    results[name] = result
                    on_result(result)
        finally:
            worker.stop()

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(max(1, min(jobs, len(model_types))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[name] for name in model_types if name in results]


def _figures(results: list[dict]) -> dict:
    built = [r for r in results if r["status"] != "build_failed"]
    cpu_clean = [r for r in built if all(r["cpu"][c]["ok"] for c in CHECKS)]
    passed = [r for r in results if r["status"] == "pass"]
    parity = [r for r in built if r["status"] in ("pass", "cpu_fail")]

    lowering_checked = [r for r in built if r.get("lowers", {}).get("ok") is not None]

    def pct(a, b):
        return round(100.0 * len(a) / len(b), 1) if b else None

    def lowers(r):
        return r.get("lowers", {}).get("ok") is True

    return {
        "architectures": len(results),
        "build_failed": len(results) - len(built),
        "pass": len(passed),
        "device_fail": sum(r["status"] == "device_fail" for r in results),
        "cpu_fail": sum(r["status"] == "cpu_fail" for r in results),
        "cpu_clean": len(cpu_clean),
        # headline: of the architectures whose every check passes on CPU, how many pass on the device
        "coverage_percent": pct([r for r in cpu_clean if r["status"] == "pass"], cpu_clean),
        # the device matches the CPU on every check the CPU passes (CPU failures not held against it)
        "parity_percent": pct(parity, built),
        # every check passes on the device, over all architectures
        "full_pass_percent_of_all": pct(passed, results),
        # with the same eyes as Trainium: the device passes AND every kernel it ran lowers to StableHLO
        "lowering_checked": len(lowering_checked),
        "lowers": sum(lowers(r) for r in lowering_checked),
        "coverage_percent_with_lowering": pct([r for r in cpu_clean if r["status"] == "pass" and lowers(r)], cpu_clean)
        if lowering_checked else None,
        **({"compiled": _compiled_figures(results)} if any("compiled" in r for r in results) else {}),
    }


def compiled_failures(result: dict, cause: str) -> list[str]:
    """``"<attention> <check>: <error>"`` for each compiled check of ``result`` failing with ``cause``."""
    compiled = result.get("compiled", {})
    if compiled.get("crashed"):
        return [compiled["error"]] if cause == OURS else []
    return [f"{attention} {name}: {check['error']}" for attention in ATTENTION
            if compiled.get(attention, {}).get("supported")
            for name, check in compiled[attention]["checks"].items() if check["cause"] == cause]


def _compiled_figures(results: list[dict]) -> dict:
    """The compiled columns: architectures that pass, fail only as the real product would, fail in ours."""
    checked = [r for r in results if "compiled" in r]
    by_status = {s: [r["model_type"] for r in checked if r["compiled"]["status"] == s]
                 for s in ("pass", "shared_fail", "ours_fail", "not_run")}
    eager_pass = [r for r in checked if r["status"] == "pass"]
    shared_ops: dict[str, list[str]] = {}
    for r in checked:
        for attention in ATTENTION:
            for check in r["compiled"].get(attention, {}).get("checks", {}).values():
                if check["cause"] == SHARED and r["model_type"] not in shared_ops.setdefault(check["op"], []):
                    shared_ops[check["op"]].append(r["model_type"])
    # passing checks with a graph torch-mlir failed on without naming an op (compiled anyway, unchecked)
    unlowered = sorted({r["model_type"] for r in checked for attention in ATTENTION
                        for c in r["compiled"].get(attention, {}).get("checks", {}).values()
                        if c["ok"] and c["compile"]["lowered"] < c["compile"]["aot_graphs"]})
    return {
        "checked": len(checked), **{s: len(names) for s, names in by_status.items()},
        "passing_with_unlowered_graphs": unlowered,
        # the target: every architecture passing the eager checks passes the compiled ones
        "eager_passing": len(eager_pass),
        "eager_passing_compiled_pass": sum(r["compiled"]["status"] == "pass" for r in eager_pass),
        "shared_failures": by_status["shared_fail"], "ours_failures": by_status["ours_fail"],
        "shared_ops": dict(sorted(shared_ops.items(), key=lambda kv: str(kv[0]))),
        "ours": {r["model_type"]: compiled_failures(r, OURS) for r in checked if r["compiled"]["status"] == "ours_fail"},
    }


def summarise(results: list[dict], installed: list[str]) -> dict:
    popular_installed = [m for m in POPULAR_TEXT_GENERATION if m in installed]
    by_type = {r["model_type"]: r for r in results}
    popular = [by_type[m] for m in popular_installed if m in by_type]
    return {
        "overall": _figures(results),
        "popular": {**_figures(popular), "list": list(POPULAR_TEXT_GENERATION),
                    "not_installed": [m for m in POPULAR_TEXT_GENERATION if m not in installed]},
        "device_failures": sorted(r["model_type"] for r in results if r["status"] == "device_fail"),
        "cpu_failures": sorted(r["model_type"] for r in results if r["status"] in ("cpu_fail", "build_failed")),
        "ops_not_lowered": _ops_not_lowered(results),
    }


def _ops_not_lowered(results: list[dict]) -> dict[str, list[str]]:
    """Each op that does not lower -> the architectures whose device checks ran it."""
    ops: dict[str, list[str]] = {}
    for r in results:
        for op in r.get("lowers", {}).get("ops_not_lowered", []):
            ops.setdefault(op, []).append(r["model_type"])
    return dict(sorted(ops.items()))
