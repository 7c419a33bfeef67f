"""Run probes in child processes, several at once, surviving crashes and hangs.

Each of ``jobs`` threads owns one worker process (:mod:`.worker`) and feeds it
architectures one at a time. A worker that dies (segfault, abort, OOM kill) or
exceeds the per-architecture timeout is killed and replaced; the architecture
is recorded as crashed in the stage it had reached, and the sweep goes on.
"""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from .popular import POPULAR_TEXT_GENERATION
from .probe import CHECKS
from .worker import MARKER

READY_TIMEOUT_SECONDS = 300


class Worker:
    def __init__(self, device: str, log_path: Path):
        self.device, self.log_path = device, log_path
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        self.events: queue.Queue = queue.Queue()
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch_neuronx.coverage.worker", "--device", self.device],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
        )
        log.close()
        threading.Thread(target=self._read, args=(self.proc, self.events), daemon=True).start()
        event = self._next(time.monotonic() + READY_TIMEOUT_SECONDS)
        if not event or event.get("event") != "ready":
            self.stop()
            raise RuntimeError(f"coverage worker did not start; see {self.log_path}")

    @staticmethod
    def _read(proc: subprocess.Popen, events: queue.Queue) -> None:
        for line in proc.stdout:
            if line.startswith(MARKER):
                events.put(json.loads(line[len(MARKER):]))
        events.put(None)  # end of stream: the process exited

    def _next(self, deadline: float) -> dict | None | str:
        try:
            return self.events.get(timeout=max(deadline - time.monotonic(), 0.001))
        except queue.Empty:
            return "timeout"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait()
        self.proc = None

    def probe(self, model_type: str, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(model_type + "\n")
        self.proc.stdin.flush()
        phase, deadline = "start", time.monotonic() + timeout
        while True:
            event = self._next(deadline)
            if event == "timeout" or event is None:
                code = None if event == "timeout" else self.proc.wait()
                self.stop()
                what = f"timed out after {timeout:.0f}s" if event == "timeout" else f"crashed (exit code {code})"
                return crashed_result(model_type, phase, f"worker {what} during the {phase} stage")
            if event["event"] == "phase":
                phase = event["phase"]
            elif event["event"] == "result":
                return event["result"]


def crashed_result(model_type: str, phase: str, message: str) -> dict:
    """A crash on the CPU (or while building) is not held against the device."""
    on_device = phase == "device"
    failed = {"ok": False, "error": message}
    return {"model_type": model_type, "crashed": True, "error": message,
            "status": "device_fail" if on_device else ("build_failed" if phase in ("start", "build") else "cpu_fail"),
            "cpu": {c: ({"ok": True, "error": None} if on_device else failed) for c in CHECKS},
            "device_checks": {c: failed for c in CHECKS}}


def run_sweep(model_types: list[str], device: str, jobs: int, timeout: float, log_dir: Path,
              on_result=lambda result: None) -> list[dict]:
    todo: queue.Queue = queue.Queue()
    for name in model_types:
        todo.put(name)
    results: dict[str, dict] = {}
    lock = threading.Lock()

    def drain(index: int) -> None:
        worker = Worker(device, log_dir / f"coverage-worker-{index}.log")
        try:
            while True:
                try:
                    name = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    result = worker.probe(name, timeout)
                except RuntimeError as exc:
                    result = crashed_result(name, "start", str(exc))
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

    def pct(a, b):
        return round(100.0 * len(a) / len(b), 1) if b else None

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
    }
