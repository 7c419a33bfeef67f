"""A compiled graph as one device program: its nodes' work, its own I/O, one launch.

The graph runs on fake tensors under ``OpRecorder``, so Dynamo graphs (torch
functions) and AOT graphs (ATen) both reach ATen ops with shapes and no data.
Its kernels (a cast among them: a ``convert``; a copy that keeps its dtype is
nothing in a graph, ``kernel.in_graph``) are gathered into the plan's
``job.GraphWork`` by ``job.graph_work``, and its seconds are ``GraphWork``'s: the
compiler keeps intermediates on chip where they fit, so the graph's inputs, weights
and outputs are HBM traffic and of the rest only what its eager kernels would move
in tensors larger than the core's SBUF; engines run concurrently
(``graph_engine_overlap``, default on: the calibration's share of the shorter of
TensorE's and the other engines' time is hidden), otherwise one after another
(docs/projection.md).
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
from .job import Factors, GraphWork, graph_work
from .kernel import KernelCost, in_graph, roofline, tensor_bytes, tensors_in, work
from .recording import OpRecorder, op_name


@dataclasses.dataclass(frozen=True)
class GraphCost:
    """The projected cost of one execution of one compiled graph (no launch overhead): its
    ``GraphWork`` under the calibration's factors, with the per-engine and per-op detail
    the reports show."""

    name: str
    nodes: int  # ATen kernels the graph contains
    work: GraphWork
    factors: Factors
    engine_seconds: dict[str, float]  # each engine's busy time (the timeline's tracks)
    flops_by_op: dict[str, int]

    @property
    def flops(self) -> int:
        return int(self.work.flops)

    @property
    def bytes(self) -> int:  # graph inputs + outputs
        return int(self.work.io_bytes)

    @property
    def intermediate_bytes(self) -> int:  # what its eager kernels would move beyond ``bytes`` in tensors over SBUF
        return int(self.work.intermediate_bytes)

    @property
    def compute_seconds(self) -> float:
        return self.work.compute_seconds(self.factors)

    @property
    def memory_seconds(self) -> float:
        return self.work.memory_seconds(self.factors)

    @property
    def seconds(self) -> float:
        return self.work.seconds(self.factors) - self.factors.launch_seconds

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
    kernels: list[KernelCost] = []
    converts: list[bool] = []  # per kernel: a cast (a convert, which the eager device runs without a kernel)

    def on_op(func, args, kwargs, out):
        engine, flops, elements, nbytes = work(func, args, kwargs, out)
        inputs, outputs = tensors_in((args, kwargs)), tensors_in(out)
        kind = in_graph(func, inputs, outputs)
        if engine != "none" and kind != "identity":
            cost = roofline(op_name(func), engine, flops, elements, nbytes, inputs, device, cal)
            kernels.append(dataclasses.replace(cost, largest_bytes=max(map(tensor_bytes, inputs + outputs), default=0)))
            converts.append(kind == "convert")

    with fake_mode:
        inputs = [fake_mode.from_tensor(x) if isinstance(x, torch.Tensor) and not fake_mode.is_our_fake(x)
                  else x for x in example_inputs]
        with OpRecorder(on_op):
            out = gm(*inputs)
    # weights held by the module (get_attr) are read from HBM like inputs
    io_bytes = _unique_bytes(inputs + list(gm.parameters()) + list(gm.buffers())) + _unique_bytes(out)
    engine_seconds: dict[str, float] = defaultdict(float)
    flops_by_op: Counter[str] = Counter()
    for k in kernels:
        engine_seconds[k.engine] += k.compute_seconds
        if k.scalar_seconds:  # a TensorE op's results leaving PSUM (and a fused attention's exp)
            engine_seconds["scalar"] += k.scalar_seconds
        if k.flops:
            flops_by_op[k.op] += k.flops
    graph = graph_work(name, dict(enumerate(kernels)), {i: 1 for i, c in enumerate(converts) if not c}, io_bytes,
                       device, cal, converts={i: 1 for i, c in enumerate(converts) if c})
    return GraphCost(name, len(kernels), graph, Factors.of(cal), dict(engine_seconds), dict(flops_by_op))
