"""``_foreach_<op>`` overloads as one ``<op>`` call per list element (torch-mlir lowers none of them)."""
from __future__ import annotations

from typing import Callable

import torch


def _scalars_times(op: str, self: torch.Tensor, tensor1: torch.Tensor, tensor2: torch.Tensor,
                   scalar: torch.Tensor) -> torch.Tensor:
    """``addcmul``/``addcdiv`` with a tensor ``value`` (their ATen forms take a Python scalar)."""
    product = tensor1 * tensor2 if op == "addcmul" else tensor1 / tensor2
    return self + scalar * product


def _per_tensor_op(foreach_name: str) -> torch._ops.OpOverloadPacket | None:
    """The op ``_foreach_<op>`` applies to each tensor (``norm``: ``linalg_vector_norm``);
    None when ATen has none (``_foreach_powsum``)."""
    op = foreach_name.removeprefix("_foreach_")
    return getattr(torch.ops.aten, "linalg_vector_norm" if op == "norm" else op, None)


def _foreach_decomposition(overload: torch._ops.OpOverload) -> Callable[..., list]:
    """A ``_foreach_<op>`` overload as one ``<op>`` call per list element.

    The real product registers foreach kernels of its own or loops over the
    per-tensor ops (TR ``python_ops/torch_mlir/ops/foreach_ops.py``); a compiled ``optimizer.step()``
    holds them functionalized (``_foreach_add.Scalar``, ``_foreach_lerp.Scalar``, …)
    and torch-mlir lowers none. List arguments are indexed, the others shared;
    the ``.Tensor`` forms of ``addcmul``/``addcdiv`` take element ``i`` of their
    1-D ``scalars`` tensor.
    """
    name = overload._schema.name.split("::", 1)[1]
    op = name.removeprefix("_foreach_")
    tensor_scalars = op in ("addcmul", "addcdiv") and overload._overloadname == "Tensor"
    per_tensor = _per_tensor_op(name)

    def each(*args, **kwargs) -> list:
        count = len(next(a for a in args if isinstance(a, (list, tuple))))
        results = []
        for i in range(count):
            args_i = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
            if tensor_scalars:
                results.append(_scalars_times(op, *args_i[:3], args_i[3][i]))
            elif op in ("addcmul", "addcdiv") and len(args_i) == 4:  # their value is keyword-only
                results.append(per_tensor(*args_i[:3], value=args_i[3]))
            else:
                results.append(per_tensor(*args_i, **kwargs))
        return results

    return each


def foreach_decompositions() -> dict:
    """:func:`_foreach_decomposition` for every functional ``aten::_foreach_*`` overload."""
    table = {}
    names = {name.split("::", 1)[1].split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names()
             if name.startswith("aten::_foreach_")}
    for name in names:
        if name.endswith("_") or _per_tensor_op(name) is None:
            continue  # in-place forms are functionalized first; _foreach_powsum has no per-tensor op
        packet = getattr(torch.ops.aten, name)
        for overload_name in packet.overloads():
            if "out" not in overload_name:
                overload = getattr(packet, overload_name)
                table[overload] = _foreach_decomposition(overload)
    return table
