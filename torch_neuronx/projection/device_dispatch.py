"""Which ATen calls the eager ``neuron`` device runs as kernels, read from the device's own
dispatch table, so a traced step (fake or meta tensors) counts what a ``neuron`` run counts.

The device decides in PyTorch's dispatcher (``csrc/aten/README.md``), first match wins:

1. an op registered for ``PrivateUse1`` runs that kernel. The boxed fallback and the fast
   path (``_C._fast_path_ops()``, ``_C._bit_exact_ops()``, and the structured and foreach ops
   routed to the fallback at module init, ``_C._ops_routed_to_fallback()``) are kernels the
   accounting counts; every other registration (views, factories, copies, the memory-format
   checks) launches none;
2. otherwise the op's composite kernel (CompositeExplicitAutograd[NonFunctional], then
   CompositeImplicitAutograd) runs and calls other ops, each routed again: ``embedding`` is an
   ``index_select``, ``slice_backward`` a ``zero_`` and a copy, ``t`` an ``as_strided``;
3. otherwise the boxed fallback's catch-all: a kernel.

No table here repeats the C++ lists: this module asks the live dispatcher and ``_C``. Native
kernels that write their values on the host but account the kernels of the composite they replace
(``_C._ops_accounted_as_composite()``: ``scalar_tensor``'s ``fill_``, ``arange``'s
``arange.start_out``) are followed as that composite.
What an accounted call adds (a ``contiguous`` kernel per strided input, nothing for an empty
input) is the accounting's rule (``csrc/accounting/Accounting.cpp``), applied by :func:`kernels_of`.
The real product's rules they follow: ops with neither a device nor a composite kernel fall back
(TR ``csrc/core/NeuronBindings.cpp:232-246``), views are whitelisted (``NeuronBindings.cpp:170-229``).
"""
from __future__ import annotations

import functools

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten

from ..runtime.extension import _C

CONTIGUITY_OP = "aten::contiguous"  # the kernel copying a strided input before its op (kernels_of)
KERNEL, COMPOSITE, NATIVE = "kernel", "composite", "native"
_COMPOSITE_KEYS = (DispatchKey.CompositeExplicitAutogradNonFunctional, DispatchKey.CompositeExplicitAutograd,
                   DispatchKey.CompositeImplicitAutograd)
_has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key


def _qualified(names) -> frozenset[str]:
    return frozenset(n if "::" in n else f"aten::{n}" for n in names)


@functools.cache
def _fallback_registrations() -> frozenset[str]:
    """Ops registered for PrivateUse1 as kernels: the fast path, the bit-exact table, the
    structured and foreach ops the fallback took at module init (``route_ops_to_fallback``) and
    the native kernels accounted as kernels (``_scaled_mm``)."""
    return _qualified([*_C._fast_path_ops(), *_C._bit_exact_ops(), *_C._ops_routed_to_fallback(),
                       *_C._accounted_native_ops()])


@functools.cache
def _accounted_as_composite() -> frozenset[str]:
    """Native kernels that account their composite's kernels (``csrc/aten/NativeRoutes.cpp``)."""
    return _qualified(_C._ops_accounted_as_composite())


@functools.cache
def route(func: torch._ops.OpOverload) -> str:
    """``KERNEL``, ``COMPOSITE`` or ``NATIVE``: what the device runs for ``func``."""
    name = func.name()
    if name in _accounted_as_composite():
        return COMPOSITE
    if _has_kernel(name, "PrivateUse1"):
        return KERNEL if name in _fallback_registrations() else NATIVE
    if composite_key(func) is not None:
        return COMPOSITE
    return KERNEL


@functools.cache
def composite_key(func: torch._ops.OpOverload) -> DispatchKey | None:
    """The composite kernel the dispatcher picks for ``func`` on the device, if any."""
    return next((k for k in _COMPOSITE_KEYS if _has_kernel(func.name(), k.name)), None)


def kernel_key(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> str:
    """The device's key of a call (``_C._kernel_key``): shapes and dtypes, static arguments by
    value, other scalars by type (TR ``torch_neuronx/kernels/base.py:103-160``)."""
    return _C._kernel_key(func.name(), *args, **kwargs)


def kernels_of(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[tuple[str, str, tuple]]:
    """``(op, key, boxed args)`` of each kernel an accounted call launches, in order: none if an
    input is empty (the real product short-circuits it: TR ``python_ops/torch_mlir/kernel.py:818-844``),
    else one ``contiguous`` kernel per strided input (``csrc/core/NeuronBindings.cpp:87-140``,
    ``argument_processor.py:77-98``) and then the op itself."""
    inputs = _inputs(func, args, kwargs)  # a wrapped number would be a 0-dim tensor: never empty or strided
    if any(t.numel() == 0 for t in inputs):
        return []
    launched = [(CONTIGUITY_OP, kernel_key(torch.ops.aten.contiguous.default, (t,), {}), (t,))
                for t in inputs if not t.is_contiguous()]
    return launched + [signature(func, args, kwargs)]


def signature(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[str, str, tuple]:
    """``(op, key, boxed args)`` of the call itself as the device keys it: a launched kernel, or
    a cast the device runs natively, which a compiled graph counts (``recording.DeviceOpRecorder``)."""
    args, kwargs = _wrapped_numbers(func, args, kwargs)
    return func.name(), kernel_key(func, args, kwargs), _boxed(func, args, kwargs)


def _boxed(func, args: tuple, kwargs: dict) -> tuple:
    """The argument list the boxed path hands the accounting: every schema argument in order."""
    rest = func._schema.arguments[len(args):]
    return tuple(args) + tuple(kwargs.get(a.name, a.default_value) for a in rest)


def _wrapped_numbers(func, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call as the device receives it: a Python number in a tensor argument (``x + 1``;
    a dispatch mode sees the number) is the 0-dim tensor PyTorch wrapped it in (int64,
    float64, bool or complex128), as a meta tensor."""
    def wrap(arg, value):
        if isinstance(value, (bool, int, float, complex)) and _is_tensor_type(arg.type):
            with _disable_current_modes():
                return torch.empty((), dtype=_WRAPPED_DTYPES[type(value)], device="meta")
        return value

    schema = func._schema.arguments
    args = tuple(wrap(schema[i], v) for i, v in enumerate(args))
    by_name = {a.name: a for a in schema}
    return args, {k: wrap(by_name[k], v) for k, v in kwargs.items()}


_WRAPPED_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


def _is_tensor_type(t) -> bool:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.TensorType)


def _inputs(func, args: tuple, kwargs: dict) -> list:
    """The tensors of a call the accounting looks at: every tensor argument but ``out=`` ones."""
    schema = func._schema.arguments
    found = []
    for i, arg in enumerate(schema):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        if arg.is_out:
            continue
        found += [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]
    return found
