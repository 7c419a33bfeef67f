"""Seeing the ATen ops a piece of Python runs, as the device would receive them.

Two dispatch modes. ``OpRecorder`` hands every op call (with its outputs) to a
callback, decomposed as ``FlopCounterMode`` decomposes: it backs graph
projection (a graph run on fake tensors is one program, whatever its ops).
``DeviceOpRecorder`` sees the kernels the eager ``neuron`` device would launch
for the same calls (``device_dispatch``: views and copies launch none,
composite ops run as the ops they call, a strided input adds a ``contiguous``
kernel), keyed as the device keys them, and the dtype casts it runs without a
kernel, which a compiled graph still does (``kernel.in_graph``); it backs
``ProjectionMode``, which projects a host, meta or fake run (the plan's trace)
as the C++ accounting projects a ``neuron`` run: one signature per device key,
a count per call; ``ProjectionMode.backward`` counts the autograd engine's gradient sums
in place where the device does (``gradient_sums``).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_map

from . import device_dispatch
from .gradient_sums import GradientSums
from .kernel import flop_formula, in_graph, tensors_in

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


class DeviceOpRecorder(TorchDispatchMode):
    """Calls ``on_kernel(op, key, args)`` for every kernel the eager device launches for the
    ops run under it (``device_dispatch``), in launch order, and ``on_convert(op, key, args)``
    for every dtype cast it runs natively (no kernel; a ``convert`` in a compiled graph)."""

    def __init__(self, on_kernel: Callable, on_convert: Callable) -> None:
        super().__init__()
        self.on_kernel = on_kernel
        self.on_convert = on_convert
        self.gradient_sums: GradientSums | None = None  # set while a backward runs (ProjectionMode.backward)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _METADATA_OPS or not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        on_device = self.gradient_sums.device_op(func, args) if self.gradient_sums else func
        route = device_dispatch.route(on_device)
        if route == device_dispatch.KERNEL:
            for op, key, op_args in device_dispatch.kernels_of(on_device, args, kwargs):
                self.on_kernel(op, key, op_args)
        elif route == device_dispatch.COMPOSITE and not func.is_view:
            # a composite view only re-strides (as_strided, view: native), so only a
            # computing composite is followed into the ops it calls
            if not self._follow_composite(func, args, kwargs):
                for op, key, op_args in device_dispatch.kernels_of(on_device, args, kwargs):
                    self.on_kernel(op, key, op_args)
        out = func(*args, **kwargs)
        if route == device_dispatch.NATIVE and in_graph(func, tensors_in((args, kwargs)), tensors_in(out)) == "convert":
            self.on_convert(*device_dispatch.signature(func, args, kwargs))
        return out

    def _follow_composite(self, func, args, kwargs) -> bool:
        """Run ``func``'s composite kernel on meta copies of its arguments, with this mode
        alone on the stack (no fake-tensor mode under it), so each op the kernel calls is
        routed, and recorded, in turn; the caller then runs ``func`` itself for its result.
        A composite that reads its data (``grouped_mm`` walks its group offsets) cannot run on
        meta copies: nothing is recorded and the caller counts ``func`` as one kernel (False)."""
        recorded: list[tuple[Callable, tuple]] = []
        hooks = self.on_kernel, self.on_convert
        self.on_kernel = lambda *a: recorded.append((hooks[0], a))
        self.on_convert = lambda *a: recorded.append((hooks[1], a))
        try:
            with _disable_current_modes():
                meta_args, meta_kwargs = tree_map(_as_meta, (args, kwargs))
                with self:
                    func._op_dk(device_dispatch.composite_key(func), *meta_args, **meta_kwargs)
        except NotImplementedError:  # "Cannot copy out of meta tensor; no data!"
            return False
        finally:
            self.on_kernel, self.on_convert = hooks
        for record, call in recorded:
            record(*call)
        return True


def _as_meta(x):
    """A tensor as a meta tensor of the same sizes, strides and dtype; a device as ``meta``."""
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device):
        return torch.device("meta")
    return x


def op_name(func) -> str:
    """``aten::mm`` for a default overload, ``aten::add.Tensor`` otherwise (as the C++ side names ops)."""
    name, overload = func._schema.name, func._overloadname
    return name if overload == "default" else f"{name}.{overload}"


class ProjectionMode:
    """Project a host, meta or fake run as the eager device would run it:
    ``with ProjectionMode(projector) as m: step()``, then ``projector.summary(m.calls)``.
    ``converts`` counts the casts the device runs without a kernel: no eager time, but the
    same code compiled moves their bytes (``job.graph_work(..., converts=m.converts)``)."""

    def __init__(self, projector) -> None:
        self.projector = projector
        self.calls: Counter[str] = Counter()
        self.converts: Counter[str] = Counter()
        self.sequence: list[str] = []  # kernel keys in call order, for the timeline
        self._recorder = DeviceOpRecorder(self._on_kernel, self._on_convert)

    def _on_kernel(self, op: str, key: str, args: tuple) -> None:
        self._count(self.calls, op, key, args)
        self.sequence.append(key)

    def _on_convert(self, op: str, key: str, args: tuple) -> None:
        self._count(self.converts, op, key, args)

    def _count(self, counter: Counter, op: str, key: str, args: tuple) -> None:
        if key not in counter:
            self.projector.add_signature(op, key, args)
        counter[key] += 1

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` inside ``with self:``, the engine's gradient sums counted as the
        device runs them: under a dispatch mode the engine never sums in place, so the mode is
        told which sums the device does (``gradient_sums``)."""
        with GradientSums([loss]) as sums:
            self._recorder.gradient_sums = sums
            try:
                loss.backward()
            finally:
                self._recorder.gradient_sums = None

    def __enter__(self) -> "ProjectionMode":
        self._recorder.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._recorder.__exit__(*exc)
