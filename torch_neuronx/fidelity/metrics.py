"""One structured snapshot of what the job would cost on Trainium.

The schema is documented in ``docs/fidelity.md`` and read by the pilot tool;
``TORCH_NEURONX_METRICS_DIR`` exports it as JSON and a per-op CSV at exit.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import torch

from .. import _C
from .compilation_cache import compilation_cache_stats
from .kernels import Accounting
from .value_semantics import get_64bit_mode

SCHEMA_VERSION = 1


def _memory() -> dict:
    cores = []
    for i in range(torch.neuron.device_count()):
        peak = torch.neuron.max_memory_allocated(i)
        _, capacity = torch.neuron.mem_get_info(i)
        cores.append({
            "index": i,
            "peak_bytes": peak,
            "allocated_bytes": torch.neuron.memory_allocated(i),
            "capacity_bytes": capacity,
            "peak_fraction": peak / capacity if capacity else 0.0,
        })
    return {"cores": cores}


def snapshot(acc: Accounting, enabled: bool) -> dict:
    stats = _C._accounting_stats()
    per_op = {
        op: {"calls": calls, "signatures": len(acc.op_signatures.get(op, ())), "misses": acc.op_misses.get(op, 0)}
        for op, (calls, _) in sorted(stats["ops"].items())
    }
    host_calls = sum(stats["ops"][op][0] for op in acc.host_ops_run if op in stats["ops"])
    # C++ counts repeats of host ops too; they are host calls, not cache hits.
    in_process_hits = stats["repeats"] - (host_calls - acc.host_first_calls) + acc.reloaded
    entries, size = acc.cache.usage() if acc.cache is not None else (0, 0)
    return {
        "schema": SCHEMA_VERSION,
        "pid": os.getpid(),
        "accounting_enabled": enabled,
        "kernels": {
            "calls": stats["calls"],
            "hits": in_process_hits + acc.disk_hits,
            "in_process_hits": in_process_hits,
            "disk_hits": acc.disk_hits,
            "misses": acc.misses,
            "host_fallback_calls": host_calls,
            "unique_signatures": sum(len(keys) for keys in acc.op_signatures.values()),
            "corrupt_entries_rewritten": acc.corrupt,
            "per_op": per_op,
        },
        "compilation_cache": compilation_cache_stats(in_process_hits, acc.disk_hits, acc.misses,
                                                     len(acc.compiled)),
        "estimated_compile_seconds": acc.misses * acc.compile_seconds,
        "compile_seconds_per_kernel_estimate": acc.compile_seconds,
        "neff_cache": {
            "enabled": acc.cache is not None,
            "dir": None if acc.cache is None else os.fspath(acc.cache.directory),
            "entries": entries,
            "bytes": size,
        },
        "memory": _memory(),
        "executed_ops": sorted(acc.tracker.executed),
        "fallback_ops": sorted(acc.tracker.fallbacks),
        "int64_float64_mode": get_64bit_mode(),
    }


def reset(acc: Accounting) -> None:
    _C._reset_accounting()
    acc.reset()
    acc.tracker.clear()
    for i in range(torch.neuron.device_count()):
        torch.neuron.reset_peak_memory_stats(i)


CSV_COLUMNS = ("op", "calls", "signatures", "misses", "estimated_compile_seconds", "fallback")


def export(data: dict, directory: os.PathLike | str) -> tuple[Path, Path]:
    """Write ``metrics-<pid>.json`` (the whole snapshot) and ``metrics-<pid>.csv``
    (one row per op, then an ``(all)`` row); one pair per process, so ranks
    sharing a directory do not overwrite each other."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"metrics-{data['pid']}"
    json_path, csv_path = stem.with_suffix(".json"), stem.with_suffix(".csv")
    json_path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    cost = data["compile_seconds_per_kernel_estimate"]
    kernels = data["kernels"]
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for op, row in kernels["per_op"].items():
            writer.writerow((op, row["calls"], row["signatures"], row["misses"],
                             row["misses"] * cost, op in data["fallback_ops"]))
        writer.writerow(("(all)", kernels["calls"], kernels["unique_signatures"], kernels["misses"],
                         data["estimated_compile_seconds"], bool(data["fallback_ops"])))
    return json_path, csv_path
