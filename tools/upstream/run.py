"""Running one target on one device in a child interpreter, with a whole-file timeout.

The child (:mod:`.child`) records outcomes as it goes; a file that runs past
its timeout is killed with its process group and keeps the outcomes it had.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .selection import Target

REPO = Path(__file__).resolve().parents[2]
DEVICE_SPEC = REPO / "torch_neuronx" / "testing" / "transformers_device_spec.py"
# Transformers imports the spec by the file name as given, so it must sit in pytest's directory.
SPEC_LINK = "neuron_spec.py"
DEVICES = ("cpu", "neuron")


@dataclasses.dataclass
class FileRun:
    target: Target
    device: str
    status: str  # "completed", "timeout", or "exit N" (pytest's exit code 2-4: interrupted, internal, usage)
    seconds: float  # host measurement: wall time of the child
    records: list[dict]


def prepare_suite_dir(root: Path) -> None:
    """Make ``root`` pytest's root directory and put the neuron device spec beside it.

    ``tests/__init__.py`` is created when missing (the PEFT sdist omits it, and its
    test files import each other relatively)."""
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "tests" / "__init__.py").touch()
    link = root / SPEC_LINK
    link.unlink(missing_ok=True)
    link.symlink_to(DEVICE_SPEC)


def device_env(device: str, deps: Path | None = None, threads: int | None = None) -> dict[str, str]:
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {', '.join(DEVICES)}")
    env = dict(os.environ)
    env.pop("TRANSFORMERS_TEST_DEVICE_SPEC", None)
    # The libraries' launchers (`accelerate launch`, `torchrun`) are found on PATH, beside this interpreter.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_TEST_DEVICE=device,
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), str(deps or ""), env.get("PYTHONPATH", "")) if p))
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # stock PyTorch (the child also blocks torch_neuronx)
    else:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
        env["TRANSFORMERS_TEST_DEVICE_SPEC"] = SPEC_LINK
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def _load(outcomes: Path) -> list[dict]:
    if not outcomes.exists():
        return []
    return [json.loads(line) for line in outcomes.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_target(target: Target, device: str, suite_root: Path, out_dir: Path, timeout: float,
               test_timeout: float, deps: Path | None = None, threads: int | None = None,
               resume: bool = False) -> FileRun:
    """Run ``target`` on ``device``; with ``resume``, a finished earlier run of it is reused."""
    out_dir.mkdir(parents=True, exist_ok=True)
    outcomes = out_dir / f"{target.slug}.{device}.jsonl"
    finished = out_dir / f"{target.slug}.{device}.status.json"
    if resume and finished.exists():
        done = json.loads(finished.read_text(encoding="utf-8"))
        return FileRun(target, device, done["status"], done["seconds"], _load(outcomes))
    finished.unlink(missing_ok=True)
    outcomes.unlink(missing_ok=True)
    pytest_args = [target.path, "-q", "-p", "no:cacheprovider", "-o", "addopts=", f"--timeout={test_timeout:g}"]
    if target.keyword:
        pytest_args += ["-k", target.keyword]
    command = [sys.executable, "-m", "tools.upstream.child", device, str(outcomes), "--", *pytest_args]
    start = time.monotonic()
    with open(out_dir / f"{target.slug}.{device}.log", "w", encoding="utf-8") as log:
        child = subprocess.Popen(command, cwd=suite_root, env=device_env(device, deps, threads), stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = child.wait(timeout=timeout)
            status = "completed" if code in (0, 1, 5) else f"exit {code}"
            if code == 1 and not outcomes.exists():
                status = "exit 1 before pytest started"
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            status = "timeout"
    seconds = round(time.monotonic() - start, 1)
    finished.write_text(json.dumps({"status": status, "seconds": seconds}), encoding="utf-8")
    return FileRun(target, device, status, seconds, _load(outcomes))
