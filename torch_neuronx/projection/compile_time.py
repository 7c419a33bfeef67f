"""The one compile-time model: projected neuronx-cc seconds of eager kernels and graphs.

Every program neuronx-cc compiles (an eager kernel signature, or a graph of
``torch.compile``) costs a fixed start-up plus a cost per op: the op count is the
program's StableHLO size where the graph was lowered, its ATen kernel count
otherwise (an eager kernel is a one-kernel program). Both constants are held once,
in ``hardware.json`` (section ``compile_time``, with why); the
``TORCHNEURON_COMPILE_SECONDS_PER_KERNEL`` setting overrides the start-up.
Nothing else in the package holds a compile-seconds figure.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ..runtime.settings import get_float
from .hardware import load_data
from .results import CompileProjection


@dataclasses.dataclass(frozen=True)
class GraphProgram:
    """One compiled graph as the compile model sees it."""

    kernels: int  # ATen kernels (FX nodes that run) in the graph
    stablehlo_ops: int | None = None  # None: the graph was not lowered


@dataclasses.dataclass(frozen=True)
class CompileModel:
    seconds_per_program: float
    seconds_per_op: float

    def program_seconds(self, ops: int) -> float:
        """Projected neuronx-cc seconds of one program of ``ops`` ops."""
        if ops < 0:
            raise ValueError(f"a program cannot have {ops} ops")
        return self.seconds_per_program + self.seconds_per_op * ops

    def project(self, eager_kernels: int = 0, graphs: Iterable[GraphProgram] = ()) -> CompileProjection:
        """First-run (empty NEFF cache) compile seconds of ``eager_kernels`` distinct kernel
        signatures and of ``graphs``."""
        graphs = list(graphs)
        if eager_kernels < 0:
            raise ValueError(f"eager_kernels={eager_kernels} must be >= 0")
        stablehlo = sum(g.stablehlo_ops for g in graphs if g.stablehlo_ops is not None)
        kernel_ops = eager_kernels + sum(g.kernels for g in graphs if g.stablehlo_ops is None)
        programs = eager_kernels + len(graphs)
        seconds = eager_kernels * self.program_seconds(1) + sum(
            self.program_seconds(g.stablehlo_ops if g.stablehlo_ops is not None else g.kernels) for g in graphs)
        basis = (f"{programs} neuronx-cc programs × {self.seconds_per_program:g} s + {self.seconds_per_op:g} s "
                 f"per op ({stablehlo} StableHLO ops where lowered, {kernel_ops} ATen kernels otherwise), "
                 "empty NEFF cache; assumed constants (projection/hardware.json compile_time)")
        return CompileProjection(seconds=seconds, programs=programs, eager_kernels=eager_kernels,
                                 graphs=len(graphs), stablehlo_ops=stablehlo, kernel_ops=kernel_ops,
                                 seconds_per_program=self.seconds_per_program,
                                 seconds_per_op=self.seconds_per_op, basis=basis)


def compile_model() -> CompileModel:
    """The model with ``hardware.json``'s constants (the start-up overridable by
    ``TORCHNEURON_COMPILE_SECONDS_PER_KERNEL``)."""
    data = load_data()["compile_time"]
    start = get_float("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL")
    return CompileModel(seconds_per_program=data["seconds_per_program"]["value"] if start is None else start,
                        seconds_per_op=data["seconds_per_op"]["value"])


def project_compile(eager_kernels: int = 0, graphs: Iterable[GraphProgram] = ()) -> CompileProjection:
    """``compile_model().project(...)``: the projected first-run compile of a job."""
    return compile_model().project(eager_kernels, graphs)


def graph_compile_seconds(stablehlo_ops: int | None, kernels: int) -> float:
    """Projected neuronx-cc seconds of one graph (StableHLO size if lowered, else its kernel count)."""
    return compile_model().program_seconds(stablehlo_ops if stablehlo_ops is not None else kernels)
