"""Kernels a loop compiles after its first iteration, and what made each one new.

On the real product a steady training step compiles nothing: its kernel keys (op
overload, tensor shapes and dtypes, the values of the arguments an op declares
static; TR ``torch_neuronx/kernels/base.py:103-160``, ``kernel_key.py``) were all
seen in the first step. A kernel new in a later step has new shapes (variable-length
batches) or a new value of a static argument. The classic case is SGD: its learning
rate reaches the device as ``alpha`` of ``_foreach_add_`` (``add_`` without foreach),
which the real product compiles by value (TR
``python_ops/torch_mlir/ops/foreach_ops.py:120``), so a scheduler that changes the rate
every step compiles the update every step. :class:`RecompileRecorder` names the op and the argument.
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from .kernel_key import static_argument_names
from .listeners import add_signature_listener, remove_signature_listener


@dataclasses.dataclass(frozen=True)
class Recompile:
    """One kernel signature first seen after the first iteration."""

    op: str                    # the overload, e.g. aten::_foreach_add_.List
    iteration: int             # 1 = the second iteration
    static_arguments: tuple[str, ...]  # static arguments with a value not seen before; () = new shapes/dtypes
    values: tuple[str, ...]    # their new values, printed


def remedy(op: str, arguments: tuple[str, ...]) -> str:
    """What to change so that steady iterations reuse their kernels."""
    if not arguments:
        return (f"{op} met new tensor shapes or dtypes: pad inputs to a few fixed lengths "
                "(e.g. multiples of 128 tokens) so every step reuses the kernels of the first")
    names = ", ".join(arguments)
    if "alpha" in arguments and ("add" in op or "sub" in op):
        return (f"{op} takes `{names}` by value: with torch.optim.SGD that is the learning rate, so "
                "each new rate compiles the parameter update again. Keep the rate piecewise constant "
                "(StepLR/MultiStepLR: one compilation per distinct value) or use Adam/AdamW "
                "(foreach, the default), whose learning rate reaches the device as a runtime input")
    return (f"{op} takes `{names}` by value: each new value compiles a new kernel; keep it "
            "constant across steps or pass it inside a tensor")


@functools.lru_cache(maxsize=None)
def _argument_names(op: str) -> tuple[str, ...]:
    name, _, overload = op.partition(".")
    return tuple(a.name for a in torch._C._get_schema(name, overload).arguments)


def _shape_of(value):
    """The part of an argument that is in the key whatever its static rows: tensors by
    shape and dtype, scalars by type, lists element by element."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.dtype
    if isinstance(value, (list, tuple)):
        return tuple(_shape_of(v) for v in value)
    return type(value).__name__


class RecompileRecorder:
    """Records the kernel signatures new to the process while active (a signature
    listener, so kernel accounting must be on) and explains those of iterations
    after the first. Call :meth:`next_iteration` between iterations."""

    def __init__(self):
        self.iteration = 0
        self.recompiles: list[Recompile] = []
        # (op, non-static part) -> the static values seen with it
        self._static_values: dict[tuple, list[dict]] = {}

    def __enter__(self) -> RecompileRecorder:
        add_signature_listener(self._on_signature)
        return self

    def __exit__(self, *exc) -> None:
        remove_signature_listener(self._on_signature)

    def next_iteration(self) -> None:
        self.iteration += 1

    def _on_signature(self, op: str, key: str, args: tuple) -> None:
        names = _argument_names(op)
        static = static_argument_names(op, names)
        shape = tuple(_shape_of(v) for n, v in zip(names, args) if n not in static)
        values = {n: v for n, v in zip(names, args) if n in static}
        earlier = self._static_values.setdefault((op, shape), [])
        if self.iteration > 0:
            changed = tuple(n for n in values if earlier and all(seen[n] != values[n] for seen in earlier))
            self.recompiles.append(Recompile(op, self.iteration, changed, tuple(repr(values[n]) for n in changed)))
        earlier.append(values)

    def summary(self) -> list[dict]:
        """One row per (op, static arguments): how many new kernels, in how many iterations, the remedy."""
        rows: dict[tuple, dict] = {}
        for r in self.recompiles:
            row = rows.setdefault((r.op, r.static_arguments), {
                "op": r.op, "static_arguments": list(r.static_arguments), "new_kernels": 0,
                "iterations": set(), "example_values": list(r.values), "remedy": remedy(r.op, r.static_arguments)})
            row["new_kernels"] += 1
            row["iterations"].add(r.iteration)
        return [{**row, "iterations": len(row["iterations"])} for row in rows.values()]
