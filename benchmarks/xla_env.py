"""Set-up of the PyTorch/XLA comparison venv (``.venv-xla``): ``python -m benchmarks.xla_env``.

torch-xla 2.9 needs torch 2.9, which cannot share a venv with the project's
torch, so the old path gets its own interpreter. PyPI's x86_64 torch 2.9 is a
CUDA build (several GB, a few minutes to install); it runs fine on the CPU
PJRT device. Never used by CI: without the venv the XLA column says why.
"""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_ENV = "TORCHNEURON_BENCH_XLA_VENV"  # overrides the venv location
_STAMP = ".benchmarks-ready"


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or REPO / ".venv-xla")


def python() -> Path:
    return venv_dir() / "bin" / "python"


def requirements() -> list[str]:
    """torch/torch-xla 2.9 plus the same transformers as the project venv (same model code)."""
    return ["torch==2.9.*", "torch-xla==2.9.*", f"transformers=={importlib.metadata.version('transformers')}"]


def unavailable_reason() -> str | None:
    """None when the venv is ready, else a sentence for the report."""
    if not (venv_dir() / _STAMP).exists():
        return (f"PyTorch/XLA venv {venv_dir()} is not set up; run `python -m benchmarks.xla_env` "
                "(installs torch 2.9 + torch-xla 2.9, several GB)")
    return None


def setup(log=print) -> str | None:
    """Create and fill the venv once; return None on success or the failure reason."""
    if unavailable_reason() is None:
        return None
    start = time.monotonic()
    log(f"setting up {venv_dir()} with {' '.join(requirements())} (takes minutes, several GB)...")
    commands = [
        [sys.executable, "-m", "venv", str(venv_dir())],
        [str(python()), "-m", "pip", "install", "--quiet", *requirements()],
    ]
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return f"PyTorch/XLA set-up failed ({' '.join(command[:4])}...): {tail}"
    (venv_dir() / _STAMP).write_text(" ".join(requirements()) + "\n")
    log(f"PyTorch/XLA venv ready in {time.monotonic() - start:.0f} s")
    return None


if __name__ == "__main__":
    reason = setup()
    if reason:
        print(reason, file=sys.stderr)
    sys.exit(1 if reason else 0)
