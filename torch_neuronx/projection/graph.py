"""A compiled graph as one device program: its nodes' work, its own I/O, one launch.

The graph runs on fake tensors under ``OpRecorder``, so Dynamo graphs (torch
functions) and AOT graphs (ATen) both reach ATen ops with shapes and no data.
The compiler keeps intermediates on chip where it can: the graph's inputs, weights
and outputs are HBM traffic, and of the rest its eager kernels would move only the
calibration's ``graph_spill_fraction`` (fitted on published results; 0 in the bare
defaults, a lower bound) — the same arithmetic as a plan's ``job.GraphWork``
(docs/projection.md). Engines run concurrently under the compiler's schedule
(``graph_engine_overlap``, default on): compute time is the busiest engine's,
otherwise the sum.
"""
from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

import torch
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten

from .calibration import Calibration
from .hardware import DeviceModel
from .kernel import roofline, tensor_bytes, tensors_in, work
from .recording import OpRecorder, op_name


@dataclasses.dataclass(frozen=True)
class GraphCost:
    """The projected cost of one execution of one compiled graph (no launch overhead)."""

    name: str
    nodes: int  # ATen kernels the graph contains
    flops: int
    bytes: int  # graph inputs + outputs
    intermediate_bytes: int  # what its eager kernels would move beyond ``bytes``
    engine_seconds: dict[str, float]
    compute_seconds: float
    memory_seconds: float
    flops_by_op: dict[str, int]

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"


def _unique_bytes(tree) -> int:
    seen, total = set(), 0
    for t in tree_flatten(tree)[0]:
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            total += tensor_bytes(t)
    return total


def project_graph(name: str, gm: torch.nn.Module, example_inputs, device: DeviceModel,
                  cal: Calibration) -> GraphCost:
    """Run ``gm`` on fake copies of ``example_inputs`` and project it as one program."""
    example_inputs = list(example_inputs)
    fake_mode = detect_fake_mode(example_inputs) or FakeTensorMode(allow_non_fake_inputs=True)
    engine_seconds: dict[str, float] = defaultdict(float)
    flops_by_op: Counter[str] = Counter()
    nodes = eager_bytes = 0

    def on_op(func, args, kwargs, out):
        nonlocal nodes, eager_bytes
        engine, flops, elements, nbytes = work(func, args, kwargs, out)
        if engine == "none":
            return
        nodes += 1
        eager_bytes += nbytes
        op = op_name(func)
        cost = roofline(op, engine, flops, elements, 0, tensors_in((args, kwargs)), device, cal)
        engine_seconds[cost.engine] += cost.compute_seconds
        if flops:
            flops_by_op[op] += flops

    with fake_mode:
        inputs = [fake_mode.from_tensor(x) if isinstance(x, torch.Tensor) and not fake_mode.is_our_fake(x)
                  else x for x in example_inputs]
        with OpRecorder(on_op):
            out = gm(*inputs)
    # weights held by the module (get_attr) are read from HBM like inputs
    nbytes = _unique_bytes(inputs + list(gm.parameters()) + list(gm.buffers())) + _unique_bytes(out)
    compute = max(engine_seconds.values(), default=0.0) if cal.graph_engine_overlap \
        else sum(engine_seconds.values())
    intermediate = max(0, eager_bytes - nbytes)
    hbm_bytes = nbytes + cal.graph_spill_fraction * intermediate
    return GraphCost(name, nodes, sum(flops_by_op.values()), nbytes, intermediate, dict(engine_seconds), compute,
                     hbm_bytes / (device.hbm_bytes_per_s * cal.efficiency["hbm"]), dict(flops_by_op))
