"""Memory of the emulated NeuronCores: the ``torch.cuda``-style memory API.

Each logical core has the HBM of the instance profile, managed as the real
product's caching segment allocator manages it (``csrc/runtime/AllocatorPools.cpp``):
tensors are blocks in segments taken from the core's HBM, freed blocks stay
cached, so ``memory_reserved()`` (the segments) is at least ``memory_allocated()``
(the live blocks, rounded to the allocator's size classes) and out-of-memory is
decided on reserved bytes. These figures are emulated counts: what the job would
use on Trainium. The host memory behind the tensors is pooled separately (the
``host_pool.*`` keys of ``memory_stats``, host measurements). Memory history and
snapshots in PyTorch's format are in ``memory_history.py``.
"""
from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch

from ..runtime import metrics_registry
from ..runtime.extension import _C
from .device_index import as_device as _dev
from .memory_history import (  # noqa: F401  (torch.neuron.memory API, as torch.cuda.memory's)
    _dump_snapshot,
    _record_memory_history,
    _snapshot,
    memory_snapshot,
)

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


def block_bytes(nbytes: int) -> int:
    """The device bytes one tensor of ``nbytes`` takes: its block after the allocator's
    rounding (requests under 16 MiB rounded up to a size class, at least 256 bytes; see
    ``csrc/runtime/AllocatorSizes.h``). 0 for 0. A pure function of its argument: what a
    memory plan adds up per tensor."""
    nbytes = operator.index(nbytes)
    if nbytes < 0:
        raise ValueError(f"block_bytes: nbytes must be >= 0, got {nbytes}")
    return _C._allocator_block_bytes(nbytes) if nbytes else 0


def segment_bytes(nbytes: int) -> int:
    """The bytes of the segment a tensor of ``nbytes`` (> 0) opens when no cached block
    holds it: 2 MiB for the small pool (requests under 1 MiB), 20 MiB shared by large
    requests whose block is under 10 MiB, the block itself above. A pure function."""
    nbytes = operator.index(nbytes)
    if nbytes <= 0:
        raise ValueError(f"segment_bytes: nbytes must be > 0, got {nbytes}")
    return _C._allocator_segment_bytes(nbytes)


def layout_bytes(nbytes: Iterable[int]) -> tuple[int, int]:
    """``(allocated, reserved)``: the blocks and the segments a fresh core's allocator holds
    after tensors of these sizes are allocated in this order and none is freed (zero-byte
    tensors take nothing). The same code every core runs, on a core of its own that no
    statistic sees: what a memory plan's long-lived tensors take on the device."""
    sizes = [operator.index(n) for n in nbytes]
    if any(n < 0 for n in sizes):
        raise ValueError(f"layout_bytes: sizes must be >= 0 bytes, got {min(sizes)}")
    return tuple(_C._allocator_layout_bytes([n for n in sizes if n]))


def memory_stats(device: Any = None) -> dict[str, Any]:
    """Flat ``torch.cuda``-style keys (emulated counts), e.g. ``allocated_bytes.all.current``
    (live blocks), ``reserved_bytes.*`` and ``segment.*`` (segments),
    ``inactive_split_bytes.*`` (cached blocks inside used segments: fragmentation),
    ``requested_bytes.*`` (the bytes tensors asked for, before rounding),
    ``num_alloc_retries`` (unused segments released to make room), ``num_device_alloc`` /
    ``num_device_free`` (segments opened / released), ``num_ooms``; plus the process-wide
    host pool (``host_pool.hits`` / ``misses`` / ``cached_bytes`` / ``limit_bytes``: host
    measurements, shared by all cores)."""
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
    """(free, total) bytes of the core's emulated HBM; free is what new segments may take
    (capacity minus reserved), as the device reports it."""
    return torch.accelerator.get_memory_info(_dev(device))


def empty_cache() -> None:
    """Return every core's segments that no tensor uses to its HBM (reserved drops; the
    cached blocks inside used segments stay), and the host memory kept for reuse to the
    system: the host pool's blocks (``TORCHNEURON_HOST_POOL_MB``,
    csrc/runtime/HostPool.cpp) and this thread's small ones."""
    torch.accelerator.empty_cache()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of the core's memory (emulated counts), as ``torch.cuda.memory_summary``."""
    dev = _dev(device)
    stats = memory_stats(dev)
    free, total = mem_get_info(dev)

    def mib(n: int) -> str:
        return f"{n / 2**20:11.1f} MiB"

    byte_rows = [
        ("Allocated memory", "allocated_bytes"),
        ("Requested memory", "requested_bytes"),
        ("Reserved memory", "reserved_bytes"),
        ("Non-releasable memory", "inactive_split_bytes"),
    ]
    count_rows = [("Allocations", "allocation"), ("Segments", "segment")]
    lines = [
        f"|{'=' * 70}|",
        f"| Neuron memory summary, {str(dev):<10} (emulated HBM, {total / 2**30:.1f} GiB per core){'':>3}|",
        f"|{'-' * 70}|",
        f"| {'Metric':<22}|{'Current':>15} |{'Peak':>15} |{'Total alloc':>13}|",
        f"|{'-' * 70}|",
    ]
    for label, key in byte_rows:
        cur, peak, alloc = (stats.get(f"{key}.all.{k}", 0) for k in ("current", "peak", "allocated"))
        lines.append(f"| {label:<22}|{mib(cur):>15} |{mib(peak):>15} |{alloc / 2**20:>9.1f} MiB|")
    if not abbreviated:
        for label, key in count_rows:
            cur, peak, alloc = (stats.get(f"{key}.all.{k}", 0) for k in ("current", "peak", "allocated"))
            lines.append(f"| {label:<22}|{cur:>15} |{peak:>15} |{alloc:>13}|")
        for label, key in (("Out-of-memory errors", "num_ooms"), ("Cache-flush retries", "num_alloc_retries")):
            lines.append(f"| {label:<22}|{stats.get(key, 0):>15} |{'':>15} |{'':>13}|")
    lines.append(f"| {'Free / capacity':<22}|{mib(free):>15} |{mib(total):>15} |{'':>13}|")
    lines.append(f"|{'=' * 70}|")
    return "\n".join(lines) + "\n"
