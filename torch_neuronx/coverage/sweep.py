"""Run probes in child processes, several at once, surviving crashes and hangs.

Each of ``jobs`` threads owns one worker process (:mod:`.probe_process`) and feeds it
architectures one at a time. A worker that dies (segfault, abort, OOM kill) or
exceeds the per-architecture timeout is killed and replaced; the architecture
is recorded as crashed in the stage it had reached, and the sweep goes on.
"""
from __future__ import annotations

import queue
import threading
from pathlib import Path

from .popular import POPULAR_TEXT_GENERATION
from .probe import CHECKS
from ..testing.child_process import ChildFailed, ChildProcess

READY_TIMEOUT_SECONDS = 300


class ProbeWorker:
    """One child process (:mod:`.probe_process`) probing architectures one at a time; replaced after a crash."""

    def __init__(self, device: str, log_path: Path, lower: bool = True):
        argv = ("--device", device) + (() if lower else ("--no-lowering",))
        self.child = ChildProcess("torch_neuronx.coverage.probe_process", argv, log_path,
                                  ready_timeout=READY_TIMEOUT_SECONDS)

    def probe(self, model_type: str, timeout: float) -> dict:
        phase = "start"

        def on_event(event: dict) -> None:
            nonlocal phase
            phase = event.get("phase", phase)

        try:
            return self.child.request({"model_type": model_type}, timeout, on_event)
        except ChildFailed as exc:
            what = {"timeout": str(exc), "exited": f"crashed ({exc})"}.get(exc.reason, f"failed ({exc})")
            return crashed_result(model_type, phase, f"worker {what} during the {phase} stage")

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


def run_sweep(model_types: list[str], device: str, jobs: int, timeout: float, log_dir: Path,
              on_result=lambda result: None, lower: bool = True) -> list[dict]:
    todo: queue.Queue = queue.Queue()
    for name in model_types:
        todo.put(name)
    results: dict[str, dict] = {}
    lock = threading.Lock()

    def drain(index: int) -> None:
        worker = ProbeWorker(device, log_dir / f"coverage-worker-{index}.log", lower)
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
