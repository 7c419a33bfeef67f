"""Memory of the emulated NeuronCores: the ``torch.cuda``-style memory API.

Each logical core has the HBM of the instance profile; every neuron tensor is
charged to its core, so these figures are what the job would use on Trainium.
Emulated HBM is not cached: reserved equals allocated (only the host memory
behind large tensors is pooled for reuse, see ``empty_cache``; its figures are
the ``host_pool.*`` keys of ``memory_stats`` and counters of the metrics registry).
"""
from __future__ import annotations

from typing import Any

import torch

from ..runtime import metrics_registry
from ..runtime.extension import _C
from .device_index import as_device as _dev

_HOST_POOL = {name: metrics_registry.labelled(text, metrics_registry.HOST) for name, text in {
    "host_pool.hits": "freed large-tensor host blocks reused from the pool",
    "host_pool.misses": "large-tensor host blocks the pool could not serve (allocated from the system)",
    "host_pool.cached_bytes": "host bytes held in the pool for reuse (a level, not a count)",
    "host_pool.limit_bytes": "most host bytes the pool may hold, TORCHNEURON_HOST_POOL_MB (a level)",
}.items()}


def _host_pool_counts() -> dict[str, int]:
    return {f"host_pool.{k}": v for k, v in _C._host_pool_stats().items()}


metrics_registry.register_source("host_pool", metrics_registry.Source(
    _host_pool_counts, _HOST_POOL.__getitem__,
    gauges=frozenset({"host_pool.cached_bytes", "host_pool.limit_bytes"})))


def memory_stats(device: Any = None) -> dict[str, Any]:
    """Flat ``torch.cuda``-style keys, e.g. ``allocated_bytes.all.current``, plus the
    process-wide host pool (``host_pool.hits`` / ``misses`` / ``cached_bytes`` /
    ``limit_bytes``: host measurements, shared by all cores)."""
    stats = dict(torch.accelerator.memory_stats(_dev(device)))
    stats.update({name: metrics_registry.counter_value(name) for name in _HOST_POOL})
    return stats


def memory_allocated(device: Any = None) -> int:
    return torch.accelerator.memory_allocated(_dev(device))


def max_memory_allocated(device: Any = None) -> int:
    return torch.accelerator.max_memory_allocated(_dev(device))


def memory_reserved(device: Any = None) -> int:
    return torch.accelerator.memory_reserved(_dev(device))


def max_memory_reserved(device: Any = None) -> int:
    return torch.accelerator.max_memory_reserved(_dev(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_dev(device))


reset_max_memory_allocated = reset_peak_memory_stats


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_dev(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the core's emulated HBM."""
    return torch.accelerator.get_memory_info(_dev(device))


def empty_cache() -> None:
    """Return the host memory kept for reuse to the system.

    Emulated HBM is not cached (reserved == allocated); the host blocks behind
    large tensors are (``TORCHNEURON_HOST_POOL_MB``, csrc/runtime/HostPool.cpp),
    and small ones per thread (this thread's are returned too).
    """
    torch.accelerator.empty_cache()  # the allocator's emptyCache empties the pool


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    dev = _dev(device)
    stats = memory_stats(dev)
    free, total = mem_get_info(dev)

    def mib(n: int) -> str:
        return f"{n / 2**20:12.1f} MiB"

    rows = [
        ("Allocated memory", "allocated_bytes"),
        ("Active memory", "active_bytes"),
        ("Reserved memory", "reserved_bytes"),
    ]
    lines = [
        f"|{'=' * 70}|",
        f"| Neuron memory summary, {str(dev):<10} (emulated HBM, {total / 2**30:.1f} GiB per core){'':>3}|",
        f"|{'-' * 70}|",
        f"| {'Metric':<22}|{'Current':>15} |{'Peak':>15} |{'Total alloc':>13}|",
        f"|{'-' * 70}|",
    ]
    for label, key in rows:
        cur = stats.get(f"{key}.all.current", 0)
        peak = stats.get(f"{key}.all.peak", 0)
        alloc = stats.get(f"{key}.all.allocated", 0)
        lines.append(f"| {label:<22}|{mib(cur):>15} |{mib(peak):>15} |{alloc / 2**20:>9.1f} MiB|")
    if not abbreviated:
        lines.append(f"| {'Allocations':<22}|{stats.get('allocation.all.current', 0):>15} |"
                     f"{stats.get('allocation.all.peak', 0):>15} |{stats.get('allocation.all.allocated', 0):>13}|")
        lines.append(f"| {'Out-of-memory errors':<22}|{stats.get('num_ooms', 0):>15} |{'':>15} |{'':>13}|")
    lines.append(f"| {'Free / capacity':<22}|{mib(free):>15} |{mib(total):>15} |{'':>13}|")
    lines.append(f"|{'=' * 70}|")
    return "\n".join(lines) + "\n"
