"""Start N ranks the way torchrun does (RANK, LOCAL_RANK, ... set before
``import torch``, so the topology and the one-core-per-rank rules apply) and
collect their exit codes and output. Cheaper than torchrun: no agent process."""
from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class RankResult:
    rank: int
    returncode: int
    output: str


def rank_env(rank: int, world: int, port: int, extra: dict[str, str] | None = None) -> dict:
    env = dict(os.environ)
    for var in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "TORCHELASTIC_RUN_ID"):
        env.pop(var, None)
    env.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(HERE), str(REPO / "examples" / "distributed"), str(REPO),
                                    env.get("PYTHONPATH", "")]),
    )
    env.update(extra or {})
    return env


class Job:
    """The processes of one multi-rank run, started together."""

    def __init__(self, scenario: str, world: int, *args: str, env: dict[str, str] | None = None):
        port = free_port()
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "worker", scenario, *args],
                env=rank_env(r, world, port, env), cwd=HERE,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for r in range(world)
        ]

    def wait(self, timeout: float = 120) -> list[RankResult]:
        deadline = time.monotonic() + timeout
        results = []
        for r, p in enumerate(self.procs):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in self.procs:
                    q.kill()
                out, _ = p.communicate()
                out += f"\n[launch] rank {r} killed after {timeout}s"
            results.append(RankResult(r, p.returncode, out))
        return results


def run_ranks(scenario: str, world: int, *args: str, timeout: float = 200,
              env: dict[str, str] | None = None) -> list[RankResult]:
    """Run ``scenarios.<scenario>(*args)`` on ``world`` ranks; wait for all of them."""
    return Job(scenario, world, *args, env=env).wait(timeout)


def check_all_ok(results: list[RankResult]) -> None:
    bad = [r for r in results if r.returncode != 0]
    assert not bad, "\n".join(f"--- rank {r.rank} (exit {r.returncode}) ---\n{r.output[-6000:]}"
                              for r in bad)
