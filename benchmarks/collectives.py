"""Collective bandwidth: the ``neuron`` process group vs plain gloo on CPU tensors.

Both run in the same job (8 ranks by default, one process per rank as torchrun
starts them): the default group is ``neuron`` and a second group is plain gloo.
Each size is measured alternately on the two (neuron, gloo, gloo, neuron, ...)
and the ratio is the median of adjacent pairs, so load from other processes on
the host hits both equally. Bandwidth is the bus
bandwidth of nccl-tests (all_reduce: 2(n-1)/n x bytes / time; all_gather:
(n-1)/n x output bytes / time). The neuron group's target is >= 0.9x gloo.

    python -m benchmarks.collectives                 # 8 ranks, 1-64 MiB
    python -m benchmarks.collectives --smoke         # 2 ranks, small sizes
``run()`` returns the same figures as a dict for the benchmark suite.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPS = ("all_reduce", "all_gather")
TARGET_RATIO = 0.9


def _bus_factor(op: str, world: int) -> float:
    return 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world


def _iterations(mib: int, scale: int) -> int:
    """More repeats for small messages: they are short and the noisiest."""
    return max(4, round(scale * 4 / max(1, mib) ** 0.5))


def _rank_main(out_path: str, sizes_mib: list[int], iters: int) -> None:
    """One rank: time each op and size on both groups; rank 0 writes the results."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    device = torch.device("neuron", int(os.environ["LOCAL_RANK"]))
    rows = []
    for op in OPS:
        for mib in sizes_mib:
            numel = mib * 2**20 // 4
            tensors = {}
            for name, dev in (("neuron", device), ("gloo", torch.device("cpu"))):
                if op == "all_reduce":
                    tensors[name] = (torch.ones(numel, device=dev),)
                else:  # the output is ``mib`` MiB, as in nccl-tests
                    tensors[name] = (torch.empty(numel, device=dev),
                                     torch.ones(numel // world, device=dev))
            groups = {"neuron": None, "gloo": gloo}

            def once(name):
                # barrier on the measured group itself: a group whose gloo threads
                # just ran a barrier starts its next collective faster (no wake-up)
                dist.barrier(group=groups[name])
                start = time.perf_counter()
                if op == "all_reduce":
                    dist.all_reduce(tensors[name][0], group=groups[name])
                else:
                    dist.all_gather_into_tensor(*tensors[name], group=groups[name])
                return time.perf_counter() - start

            once("neuron"), once("gloo")  # warm-up: connections, allocator
            times = {"neuron": [], "gloo": []}
            for i in range(_iterations(mib, iters)):
                order = ("neuron", "gloo") if i % 2 == 0 else ("gloo", "neuron")
                for name in order:
                    times[name].append(once(name))
            # the job waits for its slowest rank
            slowest = torch.tensor([times["neuron"], times["gloo"]], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=gloo)
            t_neuron, t_gloo = slowest.tolist()
            bus = _bus_factor(op, world) * mib * 2**20 / 1e9
            rows.append({
                "op": op, "size_mib": mib, "world": world,
                "neuron_s": statistics.median(t_neuron), "gloo_s": statistics.median(t_gloo),
                "neuron_busbw_gbs": bus / statistics.median(t_neuron),
                "gloo_busbw_gbs": bus / statistics.median(t_gloo),
                # each neuron run is paired with the gloo run next to it in time, so
                # load from other processes on the host cancels out of the ratio
                "ratio": statistics.median([g / n for g, n in zip(t_gloo, t_neuron)]),
                "ratio_of_best": min(t_gloo) / min(t_neuron),
            })
            del tensors
    if rank == 0:
        Path(out_path).write_text(json.dumps(rows))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(smoke: bool = False, world: int | None = None, sizes_mib: list[int] | None = None,
        iters: int | None = None, timeout: float = 900) -> dict:
    """Launch the ranks, wait, and return ``{"rows": [...], "min_ratio": ..., ...}``."""
    world = world or (2 if smoke else 8)
    sizes_mib = sizes_mib or ([1, 4] if smoke else [1, 4, 16, 64])
    iters = iters or (1 if smoke else 12)  # scale: 4*iters repeats at 1 MiB, iters/2 at 64
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="bench-coll-") as scratch:
        out = Path(scratch) / "rows.json"
        procs = []
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                       LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                       PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
            env.pop("NEURON_RT_VISIBLE_CORES", None)
            env.setdefault("TORCHNEURON_INSTANCE", "trn2.48xlarge")  # room for 8+ ranks
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "benchmarks.collectives", "--rank-worker", str(out),
                 "--sizes", ",".join(map(str, sizes_mib)), "--iters", str(iters)],
                env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.monotonic() + timeout
        logs = []
        for p in procs:
            try:
                logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"collective benchmark did not finish in {timeout}s")
        failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode]
        if failed or not out.exists():
            raise RuntimeError(f"collective benchmark ranks failed {failed}:\n{logs[0][-4000:]}")
        rows = json.loads(out.read_text())
    ratios = [r["ratio"] for r in rows]
    return {"world": world, "iters": iters, "rows": rows, "min_ratio": min(ratios),
            "geomean_ratio": statistics.geometric_mean(ratios), "target_ratio": TARGET_RATIO,
            "meets_target": min(ratios) >= TARGET_RATIO}


def format_table(result: dict) -> str:
    lines = [f"{'op':<11} {'MiB':>4} {'neuron GB/s':>12} {'gloo GB/s':>10} {'ratio':>6} "
             f"{'best/best':>9}"]
    for r in result["rows"]:
        lines.append(f"{r['op']:<11} {r['size_mib']:>4} {r['neuron_busbw_gbs']:>12.3f} "
                     f"{r['gloo_busbw_gbs']:>10.3f} {r['ratio']:>6.2f} {r['ratio_of_best']:>9.2f}")
    lines.append(f"{result['world']} ranks, repeat scale {result['iters']}; min ratio "
                 f"{result['min_ratio']:.2f}, geomean {result['geomean_ratio']:.2f} "
                 f"(target >= {TARGET_RATIO})")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="2 ranks, 1 and 4 MiB")
    p.add_argument("--world", type=int)
    p.add_argument("--sizes", help="comma-separated MiB, e.g. 1,4,16,64")
    p.add_argument("--iters", type=int, help="repeat scale: 4x this at 1 MiB, half at 64 MiB")
    p.add_argument("--json", help="also write the result here")
    p.add_argument("--rank-worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    if args.rank_worker:
        _rank_main(args.rank_worker, sizes, args.iters)
        return {}
    result = run(args.smoke, args.world, sizes, args.iters)
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
