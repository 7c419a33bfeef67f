"""Seeing the ATen ops a piece of Python runs, as the device would receive them.

``OpRecorder`` is a ``TorchDispatchMode`` that hands every op call (with its
outputs) to a callback. It backs graph projection (a graph run on fake
tensors) and ``ProjectionMode``, which projects host or meta runs the way
the C++ accounting projects eager ``neuron`` runs: one signature per distinct
(op, shapes, dtypes, scalars), a count per call.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .kernel import flop_formula

_METADATA_OPS = {
    torch.ops.aten.sym_is_contiguous.default, torch.ops.aten.is_contiguous.default,
    torch.ops.aten.is_contiguous.memory_format, torch.ops.aten.is_strides_like_format.default,
    torch.ops.aten.is_non_overlapping_and_dense.default, torch.ops.aten.size.default,
    torch.ops.aten.sym_size.default, torch.ops.aten.stride.default, torch.ops.aten.sym_stride.default,
    torch.ops.aten.storage_offset.default, torch.ops.aten.sym_storage_offset.default,
    torch.ops.aten.numel.default, torch.ops.aten.sym_numel.default, torch.ops.aten.dim.default,
    torch.ops.prim.layout.default, torch.ops.prim.device.default,
}


class OpRecorder(TorchDispatchMode):
    """Calls ``on_op(func, args, kwargs, out)`` for every ATen op that would be a kernel.

    Like ``FlopCounterMode``, an op without a FLOP formula that still has a
    decomposition is decomposed first, so its parts are what get recorded.
    """

    def __init__(self, on_op: Callable) -> None:
        super().__init__()
        self.on_op = on_op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _METADATA_OPS or not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        if flop_formula(func) is None:
            with self:
                r = func.decompose(*args, **kwargs)
            if r is not NotImplemented:
                return r
        out = func(*args, **kwargs)
        self.on_op(func, args, kwargs, out)
        return out


def signature_key(func, args, kwargs) -> str:
    """A stable key of a call: op, then each tensor's shape/stride/dtype and each scalar."""
    parts = [str(func)]
    for x in tree_flatten((args, kwargs))[0]:
        if isinstance(x, torch.Tensor):
            parts.append(f"{x.dtype}{tuple(x.shape)}{tuple(x.stride())}")
        else:
            parts.append(repr(x))
    return "|".join(parts)


def op_name(func) -> str:
    """``aten::mm`` for a default overload, ``aten::add.Tensor`` otherwise (as the C++ side names ops)."""
    name, overload = func._schema.name, func._overloadname
    return name if overload == "default" else f"{name}.{overload}"


def boxed_args(func, args, kwargs) -> tuple:
    """The argument list the C++ boxed path hands over: every schema argument in order."""
    schema = func._schema
    n = len(args)
    extra = tuple(kwargs.get(a.name, a.default_value) for a in schema.arguments[n:])
    return tuple(args) + extra


class ProjectionMode:
    """Project a host (CPU or meta) run: ``with ProjectionMode(projector) as m: step()``,
    then ``projector.summary(m.calls)``."""

    def __init__(self, projector) -> None:
        self.projector = projector
        self.calls: Counter[str] = Counter()
        self.sequence: list[str] = []  # keys in call order, for the timeline
        self._recorder = OpRecorder(self._on_op)

    def _on_op(self, func, args, kwargs, out) -> None:
        key = signature_key(func, args, kwargs)
        if key not in self.calls:
            self.projector.add_signature(op_name(func), key, boxed_args(func, args, kwargs))
        self.calls[key] += 1
        self.sequence.append(key)

    def __enter__(self) -> "ProjectionMode":
        self._recorder.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._recorder.__exit__(*exc)
