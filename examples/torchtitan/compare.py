"""TorchTitan's llama3 debug model on ``neuron`` and on CPU, from the same weights, loss by loss.

    python examples/torchtitan/compare.py --layouts 1 fsdp2 tp2 fsdp2xtp2 --steps 5 [--compile]

prepares a working directory (``workspace.py``), makes one seed checkpoint (TorchTitan's
``--checkpoint.create-seed-checkpoint``: the model initialised on the host and saved with DCP),
then runs each layout under ``torchrun`` twice, TorchTitan unchanged on ``neuron``
(``python -m torchtitan.train``) and on CPU (``cpu_reference.py``), both starting from that
checkpoint, and prints the losses per step with their difference. ``--compile`` adds
TorchTitan's ``--compile.enable`` to the neuron runs (the CPU reference always runs eagerly).
The tests (``tests/titan``) use the same functions. docs/torchtitan.md has the tables.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workspace import prepare  # noqa: E402

# TorchTitan 0.3.0's default SPMD backend ("spmd_types") calls fully_shard with dp_mesh_dims on
# plain parameters, which FSDP2 accepts only from PyTorch 2.14: on torch 2.13 any FSDP degree
# above 1 fails the same way on CPU and on neuron. The "partial_dtensor" backend (DTensor on the
# model-parallel axes, FSDP2 as before) runs on 2.13. A fixed seed makes the seed checkpoint the
# same in every run (without one, TorchTitan leaves the generator as the process finds it).
BASE_ARGS = ("--module", "llama3", "--config", "llama3_debugmodel", "--training.seq-len", "256",
             "--training.local-batch-size", "2", "--metrics.disable-color-printing",
             "--parallelism.spmd-backend", "partial_dtensor", "--debug.seed", "0")
LOSS = re.compile(r"step:\s+(\d+)\s+loss:\s+([-\d.]+)")
MEMORY = re.compile(r"step:\s+(\d+)\s+.*memory:\s+([-\d.]+)GiB\(([-\d.]+)%\)")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Processes and TorchTitan's parallel degrees (FSDP over ``dp_shard``, TP over ``tp``)."""

    nproc: int
    dp_shard: int
    tp: int

    def args(self) -> tuple[str, ...]:
        return ("--parallelism.data-parallel-shard-degree", str(self.dp_shard),
                "--parallelism.tensor-parallel-degree", str(self.tp))


LAYOUTS = {"1": Layout(1, 1, 1), "fsdp2": Layout(2, 2, 1), "tp2": Layout(2, 1, 2),
           "fsdp2xtp2": Layout(4, 2, 2)}


@dataclasses.dataclass
class Run:
    """One torchrun job: its exit code, its output, the losses rank 0 logged by step, and the CPU
    seconds its processes used (a host measurement)."""

    returncode: int
    log: str
    losses: dict[int, float]
    cpu_seconds: float

    def check(self) -> "Run":
        assert self.returncode == 0, self.log[-8000:]
        return self


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(nproc: int, device: str, args: list[str]) -> list[str]:
    """torchrun running TorchTitan unchanged (neuron) or through the CPU reference launcher."""
    entry = ["-m", "torchtitan.train"] if device == "neuron" else [str(HERE / "cpu_reference.py")]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master-port", str(_free_port()), *entry, *args]


def environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The jobs' environment: ``environ`` (default ``os.environ``), offline, one thread per rank."""
    return dict(os.environ if environ is None else environ, HF_HUB_OFFLINE="1",
                HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")


def run(workdir: Path, nproc: int, device: str, args: list[str], timeout: float = 1800,
        environ: dict[str, str] | None = None) -> Run:
    before = _children_cpu()
    try:
        done = subprocess.run(command(nproc, device, args), cwd=workdir, env=environment(environ), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        code, log = done.returncode, done.stdout
    except subprocess.TimeoutExpired as exc:
        code, log = -9, (exc.stdout or "") + f"\n[compare] killed after {timeout} s"
    losses = {int(step): float(value) for step, value in LOSS.findall(log)}
    return Run(code, log, losses, _children_cpu() - before)


class Job:
    """A torchrun job left running (to interrupt it), its output in ``log_path``."""

    def __init__(self, workdir: Path, nproc: int, device: str, args: list[str],
                 environ: dict[str, str] | None = None):
        self.log_path = workdir / f"job-{_free_port()}.log"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(command(nproc, device, args), cwd=workdir,
                                            env=environment(environ), stdout=log,
                                            stderr=subprocess.STDOUT)
        self.pid = self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def wait_for_step(self, step: int, timeout: float) -> bool:
        """Until rank 0 logs ``step`` (True) or the job ends or the time is up (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if any(int(s) >= step for s, _ in LOSS.findall(self.log())):
                return True
            time.sleep(0.5)
        return False


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def seed_checkpoint(workdir: Path, environ: dict[str, str] | None = None) -> Path:
    """TorchTitan's seed checkpoint (one process; the weights are initialised on the host)."""
    dump = workdir / "seed"
    run(workdir, 1, "neuron", [*BASE_ARGS, "--checkpoint.enable", "--checkpoint.create-seed-checkpoint",
                               "--dump-folder", str(dump)], environ=environ).check()
    return dump / "checkpoint" / "step-0"


def train_args(layout: Layout, steps: int, seed: Path, dump: Path, *extra: str) -> list[str]:
    """Train ``steps`` steps from the seed checkpoint, saving nothing unless ``extra`` says so."""
    return [*BASE_ARGS, *layout.args(), "--training.steps", str(steps), "--dump-folder", str(dump),
            "--checkpoint.enable", "--checkpoint.initial-load-path", str(seed), *extra]


def load_only(layout: Layout, steps: int, seed: Path, dump: Path, *extra: str) -> list[str]:
    return train_args(layout, steps, seed, dump, "--checkpoint.load-only", *extra)


def compare(workdir: Path, seed: Path, name: str, steps: int, compile_neuron: bool = False
            ) -> tuple[Run, Run]:
    """The same job on neuron and on CPU: (neuron run, CPU run)."""
    layout = LAYOUTS[name]
    extra = ("--compile.enable",) if compile_neuron else ()
    tag = f"{name}{'-compile' if compile_neuron else ''}"
    neuron = run(workdir, layout.nproc, "neuron",
                 load_only(layout, steps, seed, workdir / f"neuron-{tag}", *extra))
    cpu = run(workdir, layout.nproc, "cpu", load_only(layout, steps, seed, workdir / f"cpu-{name}"))
    return neuron.check(), cpu.check()


def table(neuron: Run, cpu: Run) -> str:
    rows = ["| step | neuron | CPU | neuron − CPU |", "|---:|---:|---:|---:|"]
    for step in sorted(cpu.losses):
        n, c = neuron.losses.get(step), cpu.losses[step]
        rows.append(f"| {step} | {n:.5f} | {c:.5f} | {n - c:+.5f} |" if n is not None
                    else f"| {step} | – | {c:.5f} | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="--compile.enable on the neuron runs")
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary one)")
    options = parser.parse_args()
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="titan-"))
    prepare(workdir)
    seed = seed_checkpoint(workdir)
    for name in options.layouts:
        neuron, cpu = compare(workdir, seed, name, options.steps, options.compile)
        print(f"\n{name} ({LAYOUTS[name]}){' --compile.enable' if options.compile else ''}\n")
        print(table(neuron, cpu), flush=True)


if __name__ == "__main__":
    main()
