"""Runs every (backend, workload) cell in its own fresh process, in paired rounds.

A round runs each workload once on every selected backend, the backends of one
workload back to back, in ``ROUND_ORDER`` on even rounds and reversed on odd
ones: a subject process and its reference are neighbours, and which of them goes
first alternates (A B, B A, A B, ...), so drift in the machine's load or state
cancels over the pairs instead of favouring one side. The report turns each
round's two processes into one paired ratio. A failure, timeout or missing
backend becomes a reported cell, never a crash of the suite.

Every process starts from empty caches (cold), except on the backends whose compiled graphs
persist (``Backend.warm_cache``): there the first round's process of each workload compiles
into a cache directory of its own, kept for the run, and the later rounds' processes of that
backend and workload reuse it (warm). Both sides of a compiled comparison are treated alike:
round one cold, every later round warm.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .backends import BY_NAME, ROUND_ORDER, Backend
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
        # Every cache of the process under ``scratch``: empty for a cold process, so its first
        # step includes compiling; TMPDIR too: stock Inductor keeps its precompiled headers in
        # <tmp>/torchinductor_<user> across processes (ours live in the configured cache), so a
        # "cold" Inductor run reused a header an earlier process had built (~5-9 s of a cold
        # compiled generate). A warm process is given the directory its cold process filled.
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
               threads: int | None = None, caches: Path | None = None) -> dict:
    """One measurement in a fresh process; always returns a result dict. Its caches live in
    ``caches`` when given (kept after it: the next process there starts warm), else in a
    directory of its own, removed after it."""
    cell = {"backend": backend.name, "workload": workload, "size": size}
    reason = backend.unavailable_reason()
    if reason:
        return {**cell, "status": "unavailable", "reason": reason}
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        command = [backend.python(), "-m", "benchmarks.worker", "--backend", backend.name,
                   "--workload", workload, "--size", size, "--out", str(Path(scratch) / "result.json")]
        if caches:
            caches.mkdir(parents=True, exist_ok=True)
        env = _worker_env(backend, caches or Path(scratch), threads)
        return _run_process(command, env, cell, timeout, log_path)


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


@dataclass(frozen=True)
class Step:
    """One process of a run: round ``repeat`` of ``workload`` on ``backend``; ``warm``: it reuses
    the caches of the same backend and workload's process of round one."""

    repeat: int
    workload: str
    backend: str
    warm: bool = False

    @property
    def cache(self) -> str:
        return "warm" if self.warm else "cold"


def plan(backends: list[str], workloads: list[str], pairs: int, compiled_pairs: int) -> list[Step]:
    """Every process of a run, in order: ``pairs`` rounds (``compiled_pairs`` for the backends
    that compile graphs), each workload's backends back to back, alternating; after round one
    the processes of a ``warm_cache`` backend are warm."""
    steps = []
    for repeat in range(pairs):
        order = [name for name in ROUND_ORDER if name in backends]
        if repeat % 2:
            order.reverse()
        for workload in workloads:
            for name in order:
                backend = BY_NAME[name]
                rounds = compiled_pairs if backend.graph_compile else pairs
                if workload in backend.workloads and repeat < rounds:
                    steps.append(Step(repeat, workload, name, warm=backend.warm_cache and repeat > 0))
    return steps


def run_suite(steps: list[Step], size: str, out_dir: Path, timeout: float, threads: int | None = None,
              collectives: bool = False, log=print) -> list[dict]:
    """Run ``steps`` in order (then the collectives, if asked); ``log`` gets one line per step.

    A cell that ends in unavailable/error/timeout is reported once and not run again. The
    caches of ``warm_cache`` backends, one directory per backend and workload, last the run."""
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    finished: set[tuple[str, str]] = set()
    rounds = max((step.repeat for step in steps), default=0) + 1
    with tempfile.TemporaryDirectory(prefix="bench-caches-") as kept:
        for step in steps:
            head = f"[{step.repeat + 1}/{rounds}] {step.backend:16s} {step.workload:16s} {step.cache}"
            if (step.backend, step.workload) in finished:
                log(f"{head} skipped (failed in an earlier round)")
                continue
            backend = BY_NAME[step.backend]
            log_path = logs / f"{step.backend}-{step.workload}-{step.repeat}.log"
            caches = Path(kept) / f"{step.backend}-{step.workload}" if backend.warm_cache else None
            result = run_worker(backend, step.workload, size, timeout, log_path, threads, caches)
            result.update(repeat=step.repeat, cache=step.cache)
            results.append(result)
            with open(out_dir / "raw.jsonl", "a") as progress:  # survives an interrupted run
                progress.write(json.dumps(result) + "\n")
            log(f"{head} {result['status']}" + (f" ({result['reason']})" if result.get("reason") else "")
                + (f" {result['process_s']:.0f} s" if "process_s" in result else ""))
            if result["status"] != "ok":
                finished.add((step.backend, step.workload))
    if collectives:
        result = run_collectives(size, timeout, logs / "collectives.log")
        log(f"collectives {result['status']}" + (f" ({result['reason']})" if result.get("reason") else ""))
        results.append(result)
    return results
