"""Collectives: ring/tree time over the link the group spans.

The alpha-beta model: ``steps × latency + factor × bytes / bandwidth``, with
the standard ring factors — all-reduce moves ``2(R-1)/R`` of the buffer in
``2(R-1)`` steps, all-gather, reduce-scatter and all-to-all ``(R-1)/R`` in
``R-1`` steps — and a pipelined tree for broadcast/reduce (the whole buffer,
``ceil(log2 R)`` steps). ``bytes`` is the full buffer: the tensor of an
all-reduce, the gathered output of an all-gather, the scattered input of a
reduce-scatter. A ring runs at the speed of its slowest hop, so a group
spanning chips runs at NeuronLink speed and one spanning instances at EFA's.
"""
from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Sequence

import torch

from ..runtime import metrics_registry
from ..runtime.settings import get_int
from .calibration import Calibration
from .hardware import LINKS, DeviceModel, device_model
from .kernel import ProjectionError, tensor_bytes


def _ring(r: int) -> tuple[float, int]:
    return (r - 1) / r, r - 1


def _tree(r: int) -> tuple[float, int]:
    return 1.0, math.ceil(math.log2(r))


# kind → (bandwidth factor, latency steps) for R ranks
ALGORITHMS = {
    "all_reduce": lambda r: (2 * (r - 1) / r, 2 * (r - 1)),
    "all_gather": _ring,
    "reduce_scatter": _ring,
    "all_to_all": _ring,
    "broadcast": _tree,
    "reduce": _tree,
    "gather": _ring,
    "scatter": _ring,
    "send": lambda r: (1.0, 1),
    "recv": lambda r: (1.0, 1),
    "barrier": lambda r: (0.0, math.ceil(math.log2(r))),
}


@dataclasses.dataclass(frozen=True)
class CollectiveRecord:
    """One collective a process group ran: what, how many bytes, over whom."""

    kind: str
    nbytes: int
    group_size: int
    link: str  # chip | neuronlink | efa: the slowest link the group spans

    def __post_init__(self):
        if self.kind not in ALGORITHMS:
            raise ProjectionError(f"collective kind {self.kind!r} is not one of {sorted(ALGORITHMS)}")
        if self.link not in LINKS:
            raise ProjectionError(f"link {self.link!r} is not one of {list(LINKS)}")
        if self.group_size < 1 or self.nbytes < 0:
            raise ProjectionError(f"a collective needs group_size >= 1 and nbytes >= 0, "
                                  f"got {self.group_size} and {self.nbytes}")


def link_for_ranks(ranks: Sequence[int], ranks_per_instance: int, device: DeviceModel) -> str:
    """The slowest link a group of global ranks spans, one logical core per rank
    in order (torchrun): ``chip``, ``neuronlink`` (several chips of one
    instance) or ``efa`` (several instances)."""
    if not ranks:
        raise ProjectionError("a process group has at least one rank")
    if ranks_per_instance < 1 or ranks_per_instance > device.logical_cores:
        raise ProjectionError(f"ranks_per_instance={ranks_per_instance} must be in 1..{device.logical_cores} "
                              f"(logical cores of {device.instance} at LNC={device.lnc})")
    if len({r // ranks_per_instance for r in ranks}) > 1:
        return "efa"
    chips = {(r % ranks_per_instance) // device.logical_cores_per_chip for r in ranks}
    return "neuronlink" if len(chips) > 1 else "chip"


def collective_seconds(record: CollectiveRecord, device: DeviceModel, cal: Calibration) -> float:
    """Projected seconds of one collective (0 for a group of one)."""
    r = record.group_size
    if r == 1:
        return 0.0
    factor, steps = ALGORITHMS[record.kind](r)
    bandwidth = cal.link_bytes_per_s.get(record.link, device.link_bytes_per_s[record.link])
    if bandwidth is None:
        raise ProjectionError(f"no {record.link} bandwidth is known for {device.instance}; give "
                              f"link_bytes_per_s.{record.link} in a calibration file")
    latency = cal.link_latency_seconds[record.link]
    return steps * latency + factor * record.nbytes / (bandwidth * link_efficiency(cal, record.link))


def link_efficiency(cal: Calibration, link: str) -> float:
    """Achieved / peak bandwidth over ``link``: EFA between instances has its own factor (default
    the links' inside an instance)."""
    return cal.efficiency.get("efa", cal.efficiency["link"]) if link == "efa" else cal.efficiency["link"]


# the process group's operation names → the algorithm that projects them
KIND_OF = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce", "reduce": "reduce",
    "broadcast": "broadcast", "all_gather": "all_gather", "all_gather_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "gather": "gather", "scatter": "scatter",
    "all_to_all_single": "all_to_all", "barrier": "barrier",
}
_SHARD_RESULTS = {"reduce_scatter", "scatter"}  # results hold one rank's share of the buffer


class CollectiveLog:
    """How often this process ran each distinct collective (kind, bytes, group size,
    link): the ``neuron`` process group records every collective here."""

    def __init__(self) -> None:
        self.counts: Counter[CollectiveRecord] = Counter()
        self._links: dict[tuple[int, ...], str] = {}
        self._lock = threading.Lock()

    def record(self, what: str, results: Sequence[torch.Tensor], group) -> CollectiveRecord:
        import torch.distributed as dist

        kind, size = KIND_OF[what], group.size()
        nbytes = sum(tensor_bytes(t) for t in results) * (size if kind in _SHARD_RESULTS else 1)
        try:
            ranks = tuple(dist.get_process_group_ranks(group))
        except (KeyError, ValueError, RuntimeError):  # a group c10d does not know: its own numbering
            ranks = tuple(range(size))
        link = self._links.get(ranks)
        if link is None:
            device = device_model()
            # torchrun's ranks per node; an instance holds at most its logical cores
            per_instance = get_int("LOCAL_WORLD_SIZE") or max(ranks) + 1
            link = self._links[ranks] = link_for_ranks(ranks, min(per_instance, device.logical_cores), device)
        rec = CollectiveRecord(kind, nbytes, size, link)
        with self._lock:
            self.counts[rec] += 1
        return rec

    def clear(self) -> None:
        with self._lock:
            self.counts.clear()


    def snapshot(self) -> list[dict]:
        """The log as JSON: one entry per distinct collective, with its count."""
        with self._lock:
            return [{**dataclasses.asdict(rec), "calls": n} for rec, n in self.counts.items()]


COLLECTIVE_LOG = CollectiveLog()
metrics_registry.register_store("projection.collectives", COLLECTIVE_LOG.snapshot, COLLECTIVE_LOG.clear,
                                "collectives the neuron process groups ran (kind, bytes, ranks, link)",
                                metrics_registry.HOST)
