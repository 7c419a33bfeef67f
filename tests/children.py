"""Fresh interpreters started together.

A child ``python`` spends seconds importing torch (and Transformers) on one core, so
independent children started at once overlap on a 2-core machine: a test file starts its
children in one fixture and each test waits for its own (running one such test still starts
the whole set).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest


def start(args: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """``python ARGS``, its output captured as text."""
    return subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# A ``python`` that starts ARGS in a fresh ``python`` with SIGINT's default disposition: a
# process started in the background by a non-interactive shell inherits SIGINT ignored, and
# Python then installs no KeyboardInterrupt handler, so a test that interrupts its child must
# not depend on how pytest itself was started (a real user's backgrounded CLI keeps ignoring it).
_SIGINT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def start_interruptible(args: list[str], env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """``python ARGS`` as a terminal starts it (SIGINT not ignored), its output captured as text."""
    return start(["-c", _SIGINT_DEFAULT, *args], env=env)


# A ``python`` that starts ARGS in a fresh ``python`` whose writes past LIMIT bytes fail (EFBIG,
# SIGXFSZ ignored): a full disk. The limit is per process, so set in pytest's own process it would
# also hold for the background lane's jobs and every child they start meanwhile.
_FILE_LIMIT = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
               "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_FSIZE)[1])); "
               "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")


def run_with_file_limit(limit_bytes: int, args: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` on a disk that takes files up to ``limit_bytes``, once it has ended."""
    return finished(start(["-c", _FILE_LIMIT, str(limit_bytes), *args], env=env))


def finished(proc: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    """The child's exit code and output, once it has ended."""
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_together(scripts: Iterable[Path], env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> list[subprocess.CompletedProcess]:
    """Each script in its own fresh ``python``, all started at once, once all have ended: a race
    at start or exit gets the load of its neighbours, as on a busy machine."""
    started = [start([str(script)], env=env, cwd=cwd) for script in scripts]
    try:
        return [finished(proc) for proc in started]
    finally:
        stop(started)


def stop(procs: Iterable[subprocess.Popen]) -> None:
    """End the children no test waited for (a test failed before it did)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def seed_toolchain(source: Path, target: Path) -> None:
    """Give the compile directory ``target`` Inductor's one-off set-up found in the compile
    directory ``source`` (``compile/`` of a ``TORCH_NEURONX_NEFF_CACHE_DIR``, or the Inductor
    cache directory a process was given): its precompiled headers (a 150 MB header rebuilt in
    seconds of C++ per cache) and its vector-ISA probe libraries. They describe this machine's
    compiler, not a compiled graph, so a cache cold for graphs may start with them. A header is
    renamed into place once built and a probe cut short is rebuilt (``compile/artifacts.py``), so
    a cache another process is filling is safe to seed from."""
    if (source / "precompiled_headers").is_dir():
        shutil.copytree(source / "precompiled_headers", target / "precompiled_headers",
                        ignore=shutil.ignore_patterns(".tmp-*"))
    for probe in source.glob("*/*.cpp"):
        if "__avx_chk_kernel" in probe.read_text(errors="replace"):
            for part in (probe, probe.with_suffix(".so")):
                if part.exists():
                    (target / part.parent.name).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(part, target / part.relative_to(source))


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
        self._jobs: dict[Hashable, tuple[Future, Callable, tuple]] = {}

    def queue(self, key: Hashable, job: Callable, arguments: Callable[[], tuple]) -> None:
        """Queue ``job(*arguments())``, its arguments taken now."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-lane")
        args = arguments()
        self._jobs[key] = (self._pool.submit(job, *args), job, args)

    def take(self, key: Hashable, job: Callable, arguments: Callable[[], tuple]):
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


def lane_fixture(name: str, job: Callable, *, folder_prefix: str | None = None):
    """The fixture ``name`` giving the outcome of ``job(folder, environ)`` (``job(environ)``
    without ``folder_prefix``): a new temporary folder, removed after the module's last test,
    and ``os.environ`` as it was when the job was queued. The job is queued on the background
    lane once collection is done when a selected test uses the fixture (``queue_lane_jobs``,
    called by conftest.py); the fixture runs it itself otherwise. Module-scoped: the lane runs a
    job once, so every test of the module using the fixture shares that one outcome (a narrower
    scope would silently run the job again, in the foreground, for each further test)."""
    key = (job.__module__, name)

    def arguments() -> tuple:
        environ = dict(os.environ)
        return (environ,) if folder_prefix is None else (Path(tempfile.mkdtemp(prefix=folder_prefix)), environ)

    def run(*args):
        return args, job(*args)

    def fixture():
        args, outcome = background.take(key, run, arguments)
        yield outcome
        if folder_prefix is not None:
            shutil.rmtree(args[0], ignore_errors=True)

    _lane_jobs[key] = (run, arguments)
    return pytest.fixture(scope="module", name=name)(fixture)


_lane_jobs: dict[tuple[str, str], tuple[Callable, Callable]] = {}


def uses_lane(module: str, fixtures: Iterable[str]) -> bool:
    """Whether ``fixtures`` (of a test in ``module``) include one of the module's lane fixtures."""
    return any((module, name) in _lane_jobs for name in fixtures)


def queue_lane_jobs(module: str, fixtures: Iterable[str]) -> None:
    """Queue, in the order given, the jobs of ``module``'s lane fixtures among ``fixtures`` (the
    ones its selected tests use)."""
    for name in fixtures:
        if (module, name) in _lane_jobs:
            background.queue((module, name), *_lane_jobs[(module, name)])


IN_CHILD_ENV = "PYTEST_IN_CHILD_SESSION"  # the suite's own, not a project setting
"""Set in a child pytest running a ``child_process`` module's tests: there they run as written."""

def child_pytest(rootdir: Path, nodeids: list[str], environ: dict[str, str]) -> dict:
    """Run ``nodeids`` (of the session in ``rootdir``) in one child pytest: per test name, its outcome from the child's JUnit
    report (``passed``, ``failed``, ``skipped`` or ``xfailed``) and the child's text for it;
    under ``None``, the child's own output (for a test the report does not name)."""
    with tempfile.TemporaryDirectory(prefix="torchneuron-child-pytest-") as folder:
        report = Path(folder) / "junit.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"--junitxml={report}", *nodeids], cwd=rootdir, env={**environ, IN_CHILD_ENV: "1"},
                              capture_output=True, text=True, timeout=1800)
        cases = list(ElementTree.parse(report).iter("testcase")) if report.exists() else []
    outcomes: dict = {None: ("failed", f"child pytest exit {done.returncode}\n{done.stdout}\n{done.stderr}")}
    for case in cases:
        outcome, text = "passed", ""
        for part in case:
            if part.tag in ("failure", "error"):
                outcome, text = "failed", f"{part.get('message', '')}\n{part.text or ''}"
            elif part.tag == "skipped":
                outcome = "xfailed" if part.get("type") == "pytest.xfail" else "skipped"
                text = part.get("message", "")
        outcomes[case.get("name")] = (outcome, text)
    return outcomes
