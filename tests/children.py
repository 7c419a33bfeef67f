"""Fresh interpreters started together.

A child ``python`` spends seconds importing torch (and Transformers) on one core, so
independent children started at once overlap on a 2-core machine: a test file starts its
children in one fixture and each test waits for its own (running one such test still starts
the whole set).
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path


def start(args: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """``python ARGS``, its output captured as text."""
    return subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    """The child's exit code and output, once it has ended."""
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def stop(procs: Iterable[subprocess.Popen]) -> None:
    """End the children no test waited for (a test failed before it did)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


class Lane:
    """Jobs run one at a time on a background thread, in the order queued.

    pytest's own process keeps about one of two cores busy, so a job that is a child process
    needing nothing from the tests before it (a cold compile in a fresh cache, a CLI run) is
    queued right after collection and runs beside them. A job gets everything it uses as
    arguments taken at queueing time (environment, paths): tests change ``os.environ`` and
    the working directory meanwhile. ``take`` gives a job's outcome, running the job in the
    test itself when it has not begun; ``close`` drops the jobs not begun (a session ended early).
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._jobs: dict[str, tuple[Future, Callable, tuple]] = {}

    def queue(self, key: str, job: Callable, arguments: Callable[[], tuple]) -> None:
        """Queue ``job(*arguments())``, its arguments taken now."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-lane")
        args = arguments()
        self._jobs[key] = (self._pool.submit(job, *args), job, args)

    def take(self, key: str, job: Callable, arguments: Callable[[], tuple]):
        """The outcome of the job queued as ``key`` (run here with its queued arguments if it
        has not begun), else of ``job(*arguments())``."""
        if key not in self._jobs:
            return job(*arguments())
        future, job, args = self._jobs.pop(key)
        return job(*args) if future.cancel() else future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


background = Lane()
