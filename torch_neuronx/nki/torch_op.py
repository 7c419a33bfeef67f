"""``torch_neuronx.nki_op``: an NKI kernel as a PyTorch custom operator.

Built on ``torch.library.custom_op`` with a CPU implementation only: on
``neuron`` tensors the call reaches the device's boxed fallback, which runs
the kernel on zero-copy CPU aliases and accounts one compile per (shapes,
dtypes, non-tensor arguments) like any other kernel (see docs/fidelity.md).
Inside ``torch.compile(backend="neuron")`` the op is one opaque graph node.
The fake (shape) implementation runs the kernel once per signature on zeros,
so kernels need no hand-written meta function; ``register_fake`` overrides it.
Training support is PyTorch's own ``op.register_autograd(backward, setup_context=...)``.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Iterable

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily


def _signature_key(args) -> tuple:
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)


def _fake_by_running(fn: Callable):
    """Output metadata from one real run on zero-filled CPU tensors, cached per signature."""
    cache: dict = {}
    parameters = list(inspect.signature(fn).parameters)

    def fake(*args, **kwargs):
        bound = dict(zip(parameters, args), **kwargs)
        key = _signature_key(bound.values())
        if key not in cache:
            with unset_fake_temporarily():
                real = {name: torch.zeros(v.shape, dtype=v.dtype) if isinstance(v, torch.Tensor) else v
                        for name, v in bound.items()}
                out = fn(**real)
            cache[key] = _metadata(out)
        device = next((v.device for v in bound.values() if isinstance(v, torch.Tensor)), None)
        return _materialize(cache[key], device)

    return fake


def _metadata(out):
    if isinstance(out, torch.Tensor):
        return ("tensor", tuple(out.shape), out.dtype)
    if isinstance(out, (list, tuple)):
        return ("seq", type(out), [_metadata(o) for o in out])
    return ("value", out)


def _materialize(meta, device):
    kind = meta[0]
    if kind == "tensor":
        return torch.empty(meta[1], dtype=meta[2], device=device)
    if kind == "seq":
        return meta[1](_materialize(m, device) for m in meta[2])
    return meta[1]


def nki_op(name: str, fn: Callable | None = None, /, *, mutates_args: str | Iterable[str] = (),
           schema: str | None = None):
    """Register ``fn`` (an ``@nki.jit`` kernel, or a function calling kernels) as ``torch.ops.<ns>.<name>``.

    The schema comes from ``fn``'s type hints as in ``torch.library.custom_op``
    (annotate the kernel's parameters: ``x: torch.Tensor, eps: float``). Returns
    the ``CustomOpDef``: call it like the function, ``register_autograd`` on it.
    """
    if fn is None:
        return functools.partial(nki_op, name, mutates_args=mutates_args, schema=schema)
    from .jit import Kernel  # the emulator loads on first registration, not at `import torch`

    impl = fn
    if isinstance(fn, Kernel):
        kernel = fn

        def impl(*args, **kwargs):
            return kernel(*args, **kwargs)

        impl.__signature__ = inspect.signature(kernel.func)
        impl.__name__ = kernel.__name__
    op = torch.library.custom_op(name, impl, mutates_args=mutates_args, device_types="cpu", schema=schema)
    op.register_fake(_fake_by_running(impl))
    _declare_non_tensor_arguments_static(op)
    from ..compile.lowering.custom_calls import register_custom_call

    register_custom_call(op._opoverload._schema.name)
    return op


_NKI_COMPILE_KEY = ("docs how-to-work-with-nki: an NKI kernel compiles per (shapes, dtypes, "
                    "non-tensor arguments)")


def _declare_non_tensor_arguments_static(op) -> None:
    """Every non-tensor argument goes into the op's kernel key by value, as the real product
    compiles an NKI kernel per non-tensor arguments (unlike ATen ops, whose scalars are inputs)."""
    from ..accounting.kernel_key import StaticArgument, add_static_arguments

    schema = op._opoverload._schema
    name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    rows = [StaticArgument(name, arg.name, _NKI_COMPILE_KEY) for arg in schema.arguments
            if "Tensor" not in str(arg.type)]
    if rows:
        add_static_arguments(rows)
