"""Runs every (backend, workload) pair in its own fresh process and collects the results.

Repeats are interleaved (all backends once, then again) so that load from
other jobs on a shared machine spreads over every backend instead of landing
on one. A failure, timeout or missing backend becomes a reported cell, never
a crash of the suite.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .backends import BY_NAME, Backend
from .xla_env import REPO

COLLECTIVES = "collectives"


def _worker_env(backend: Backend, scratch: Path, threads: int | None = None) -> dict:
    env = dict(os.environ)
    env.update(backend.env)
    if threads:
        # Intra-op threads of PyTorch's CPU kernels (all non-XLA paths run on them).
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env.update({
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # Cold caches in every process: the first step must include compiling. TMPDIR too:
        # stock Inductor keeps its precompiled headers in <tmp>/torchinductor_<user> across
        # processes (ours live in the configured cache), so a "cold" Inductor run reused a
        # header an earlier process had built (~5-9 s of a cold compiled generate).
        "TMPDIR": str(scratch),
        "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(scratch / "neff"),
        # One compile thread: no compile-worker pool competing with the measured process.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    })
    return env


def _run_process(command: list[str], env: dict, cell: dict, timeout: float, log_path: Path) -> dict:
    """Run ``command`` (last argument: the JSON result path); kill its whole group on timeout."""
    out = Path(command[-1])
    start = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return {**cell, "status": "timeout", "reason": f"no result within {timeout:.0f} s"}
    if not out.exists():
        return {**cell, "status": "error", "reason": f"exit code {process.returncode}; see {log_path}"}
    return {**cell, **json.loads(out.read_text()), "process_s": time.monotonic() - start}


def run_worker(backend: Backend, workload: str, size: str, timeout: float, log_path: Path,
               threads: int | None = None) -> dict:
    """One measurement in a fresh process; always returns a result dict."""
    cell = {"backend": backend.name, "workload": workload, "size": size}
    reason = backend.unavailable_reason()
    if reason:
        return {**cell, "status": "unavailable", "reason": reason}
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        command = [backend.python(), "-m", "benchmarks.worker", "--backend", backend.name,
                   "--workload", workload, "--size", size, "--out", str(Path(scratch) / "result.json")]
        return _run_process(command, _worker_env(backend, Path(scratch), threads), cell, timeout, log_path)


def run_collectives(size: str, timeout: float, log_path: Path) -> dict:
    """Workload 5 lives in ``benchmarks/collectives.py`` (the distributed engineer's module)."""
    cell = {"backend": "neuron", "workload": COLLECTIVES, "size": size}
    if not (REPO / "benchmarks" / "collectives.py").exists():
        return {**cell, "status": "unavailable", "reason": "benchmarks/collectives.py is not written yet"}
    backend = BY_NAME["neuron"]
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        code = ("import json, sys; from benchmarks.collectives import run; "
                f"json.dump({{'status': 'ok', 'collectives': run(smoke={size == 'smoke'})}}, "
                "open(sys.argv[1], 'w'))")
        command = [backend.python(), "-c", code, str(Path(scratch) / "result.json")]
        return _run_process(command, _worker_env(backend, Path(scratch)), cell, timeout, log_path)


def run_suite(backends: list[str], workloads: list[str], size: str, repeats: int,
              out_dir: Path, timeout: float, threads: int | None = None, log=print) -> list[dict]:
    """All selected measurements, ``repeats`` times each; a cell that fails is not retried."""
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    finished: set[tuple[str, str]] = set()  # cells that ended in unavailable/error/timeout
    for repeat in range(repeats):
        for name in backends:
            backend = BY_NAME[name]
            for workload in workloads:
                if workload == COLLECTIVES or workload not in backend.workloads:
                    continue
                if (name, workload) in finished:
                    continue
                log_path = logs / f"{name}-{workload}-{repeat}.log"
                result = run_worker(backend, workload, size, timeout, log_path, threads)
                result["repeat"] = repeat
                results.append(result)
                with open(out_dir / "raw.jsonl", "a") as progress:  # survives an interrupted run
                    progress.write(json.dumps(result) + "\n")
                log(f"[{repeat + 1}/{repeats}] {name:16s} {workload:14s} {result['status']}"
                    + (f" ({result['reason']})" if result.get("reason") else "")
                    + (f" {result['process_s']:.0f} s" if "process_s" in result else ""))
                if result["status"] != "ok":
                    finished.add((name, workload))
    if COLLECTIVES in workloads:
        result = run_collectives(size, timeout, logs / "collectives.log")
        log(f"collectives {result['status']}" + (f" ({result['reason']})" if result.get("reason") else ""))
        results.append(result)
    return results
