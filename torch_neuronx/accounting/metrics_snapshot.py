"""One structured snapshot of what the job would cost on Trainium.

The accounting reports its counters into the metrics registry
(``torch_neuronx.debug.metrics``); the snapshot is built from the registry.

The schema is documented in ``docs/fidelity.md`` and read by the pilot tool;
``TORCH_NEURONX_METRICS_DIR`` exports it as JSON and a per-op CSV at exit.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Callable

import torch

from ..runtime.extension import _C
from ..projection import compile_model, project_compile
from ..runtime import metrics_registry as registry
from .signatures import Accounting
from .compilation_cache import compilation_cache_stats
from ..numerics.narrowing import get_64bit_mode

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
            "peak_reserved_bytes": torch.neuron.max_memory_reserved(i),  # the allocator's segments
            "reserved_bytes": torch.neuron.memory_reserved(i),
            "capacity_bytes": capacity,
            "peak_fraction": peak / capacity if capacity else 0.0,
        })
    return {"cores": cores}


_KERNEL_COUNTERS = {
    "kernel.calls": ("device ops run (fast path and fallback)", registry.HOST),
    "kernel.in_process_hits": ("kernel calls whose signature this process had already compiled",
                               registry.EMULATED),
    "kernel.disk_hits": ("new signatures found in the persistent NEFF cache", registry.EMULATED),
    "kernel.misses": ("signatures Trainium would compile (neither in process nor on disk)",
                      registry.EMULATED),
    "kernel.host_fallback_calls": ("calls of ops the real product runs on the host CPU", registry.HOST),
    "kernel.unique_signatures": ("distinct kernel signatures seen", registry.EMULATED),
    "kernel.corrupt_entries_rewritten": ("unreadable NEFF cache entries rewritten", registry.HOST),
}
_PER_OP = {
    "op_calls/": ("calls of this op on the device", registry.HOST),
    "op_signatures/": ("distinct kernel signatures of this op", registry.EMULATED),
    "op_misses/": ("compiles of this op Trainium would do", registry.EMULATED),
}


def _describe(name: str) -> str:
    prefix = name.split("/", 1)[0] + "/"
    text, kind = _PER_OP[prefix] if prefix in _PER_OP else _KERNEL_COUNTERS[name]
    return registry.labelled(text, kind)


def _counts(acc: Accounting) -> dict[str, int]:
    """The accounting's counters: C++ call counts joined with the Python accounting."""
    stats = _C._accounting_stats()
    calls = {op: n for op, (n, _) in stats["ops"].items()}
    host_calls = sum(calls.get(op, 0) for op in acc.host_ops_run)
    out = {
        "kernel.calls": stats["calls"],
        # C++ counts repeats of host ops too; they are host calls, not cache hits.
        "kernel.in_process_hits": stats["repeats"] - (host_calls - acc.host_first_calls) + acc.reloaded,
        "kernel.disk_hits": acc.disk_hits,
        "kernel.misses": acc.misses,
        "kernel.host_fallback_calls": host_calls,
        "kernel.unique_signatures": sum(len(keys) for keys in acc.op_signatures.values()),
        "kernel.corrupt_entries_rewritten": acc.corrupt,
    }
    out.update({f"op_calls/{op}": n for op, n in calls.items()})
    out.update({f"op_signatures/{op}": len(keys) for op, keys in acc.op_signatures.items()})
    out.update({f"op_misses/{op}": n for op, n in acc.op_misses.items()})
    return out


def register_sources(current: Callable[[], Accounting]) -> None:
    """Report the accounting (whichever object is current) into the metrics registry."""
    registry.register_source("accounting", registry.Source(
        read=lambda: _counts(current()), describe=_describe, reset=lambda: _reset_counts(current())))


def snapshot(acc: Accounting, enabled: bool) -> dict:
    """The schema-versioned snapshot, read from the metrics registry."""
    counts = registry.counters()
    per_op = {
        op: {"calls": n, "signatures": counts.get(f"op_signatures/{op}", 0),
             "misses": counts.get(f"op_misses/{op}", 0)}
        for op, n in sorted((name.split("/", 1)[1], n) for name, n in counts.items()
                            if name.startswith("op_calls/"))
    }
    in_process_hits = counts["kernel.in_process_hits"]
    entries, size = acc.cache.usage() if acc.cache is not None else (0, 0)
    return {
        "schema": SCHEMA_VERSION,
        "pid": os.getpid(),
        "accounting_enabled": enabled,
        "kernels": {
            "calls": counts["kernel.calls"],
            "hits": in_process_hits + counts["kernel.disk_hits"],
            "in_process_hits": in_process_hits,
            "disk_hits": counts["kernel.disk_hits"],
            "misses": counts["kernel.misses"],
            "host_fallback_calls": counts["kernel.host_fallback_calls"],
            "unique_signatures": counts["kernel.unique_signatures"],
            "corrupt_entries_rewritten": counts["kernel.corrupt_entries_rewritten"],
            "per_op": per_op,
        },
        "compilation_cache": compilation_cache_stats(in_process_hits, counts["kernel.disk_hits"],
                                                     counts["kernel.misses"], len(acc.compiled)),
        # projected neuronx-cc time of this run's misses (projection/compile_time.py)
        "estimated_compile_seconds": project_compile(eager_kernels=counts["kernel.misses"]).seconds,
        "compile_seconds_per_kernel_estimate": compile_model().program_seconds(1),
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
        **_section_values(),
    }


# --- sections added by higher layers (e.g. compile's eager lowering report) ---

_sections: dict[str, tuple[Callable[[], dict], Callable[[], None]]] = {}


def add_section(name: str, read: Callable[[], dict], reset: Callable[[], None]) -> None:
    """Add ``name: read()`` to every snapshot; ``reset()`` runs with ``reset_metrics()``.

    Layers above accounting cannot be imported here, so they register themselves; the section
    is a store of the metrics registry too, so ``clear_counters()`` forgets it."""
    _sections[name] = (read, reset)
    registry.register_store(f"metrics.{name}", read, reset, f"the {name!r} section of metrics()",
                            registry.EMULATED)


def _section_values() -> dict:
    return {name: read() for name, (read, _) in _sections.items()}


def _reset_counts(acc: Accounting) -> None:
    _C._reset_accounting()
    acc.reset()
    acc.tracker.clear()
    for _, reset_section in _sections.values():
        reset_section()


def reset(acc: Accounting) -> None:
    _reset_counts(acc)
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
    kernels = data["kernels"]
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for op, row in kernels["per_op"].items():
            writer.writerow((op, row["calls"], row["signatures"], row["misses"],
                             project_compile(eager_kernels=row["misses"]).seconds, op in data["fallback_ops"]))
        writer.writerow(("(all)", kernels["calls"], kernels["unique_signatures"], kernels["misses"],
                         data["estimated_compile_seconds"], bool(data["fallback_ops"])))
    return json_path, csv_path
