"""The eager kernel key's static arguments: the data behind "what recompiles".

The real product keys an eager kernel by the op overload, each tensor's shape
and dtype, the *type* of every other Python scalar (a new value is a runtime
input, not a compile) and the *value* of the arguments an op declares static
(TR ``torch_neuronx/kernels/base.py:103-160``; TR and its public URL: ARCHITECTURE.md,
"How the real product is cited"). This table lists those static
arguments, one row per (op, argument name), each with its source. C++ resolves
it once per schema to a bitmask of argument indices (``csrc/accounting/Accounting.cpp``),
so the per-call cost does not depend on the table's size.

``op`` is a full overload (``aten::add.Tensor``), an op name covering all its
overloads (``aten::add``), or a glob with ``*`` (``*`` alone: every op).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from ..runtime.extension import _C


@dataclass(frozen=True)
class StaticArgument:
    op: str
    argument: str
    source: str


_BINARY = "TR torch_neuronx/python_ops/torch_mlir/ops/binary.py"
_FOREACH = "TR torch_neuronx/python_ops/torch_mlir/ops/foreach_ops.py:120, 217, 445, 518, 587"
_REDUCTION = ("TR torch_neuronx/python_ops/torch_mlir/ops/reduction.py, misc.py "
              "(dims / keepdim / dtype of reductions, softmax, etc.; the emulator applies it to every op)")

STATIC_ARGUMENTS: tuple[StaticArgument, ...] = (
    StaticArgument("aten::add", "alpha", f"{_BINARY}:8-9"),
    StaticArgument("aten::add_", "alpha", f"{_BINARY}:8-9"),
    StaticArgument("aten::sub", "alpha", f"{_BINARY}:24-25"),
    StaticArgument("aten::sub_", "alpha", f"{_BINARY}:24-25"),
    StaticArgument("aten::pow", "exponent", f"{_BINARY}:49-50"),
    StaticArgument("aten::pow_", "exponent", f"{_BINARY}:49-50"),
    StaticArgument("aten::div", "rounding_mode", f"{_BINARY}:31-33"),
    StaticArgument("aten::div_", "rounding_mode", f"{_BINARY}:31-33"),
    StaticArgument("aten::fill_", "value", "TR torch_neuronx/python_ops/torch_mlir/ops/creation.py:44-50"),
    StaticArgument("aten::addmm", "beta", "TR torch_neuronx/python_ops/torch_mlir/ops/linear_algebra.py:28"),
    StaticArgument("aten::addmm", "alpha", "TR torch_neuronx/python_ops/torch_mlir/ops/linear_algebra.py:28"),
    StaticArgument("aten::index_add", "alpha", "TR torch_neuronx/python_ops/torch_mlir/ops/indexing.py:85-88"),
    StaticArgument("aten::native_dropout", "p", "TR torch_neuronx/python_ops/torch_mlir/ops/dropout.py:8-11"),
    StaticArgument("aten::softplus", "beta", "TR torch_neuronx/python_ops/torch_mlir/ops/activation.py:34"),
    StaticArgument("aten::softplus", "threshold", "TR torch_neuronx/python_ops/torch_mlir/ops/activation.py:34"),
    StaticArgument("aten::threshold", "threshold", "TR torch_neuronx/python_ops/torch_mlir/ops/misc.py:135"),
    StaticArgument("aten::threshold", "value", "TR torch_neuronx/python_ops/torch_mlir/ops/misc.py:135"),
    StaticArgument("aten::_foreach_add_", "alpha", _FOREACH),
    StaticArgument("aten::_foreach_sub_", "alpha", _FOREACH),
    StaticArgument("*", "dim", _REDUCTION),
    StaticArgument("*", "keepdim", _REDUCTION),
    StaticArgument("*", "dtype", _REDUCTION),
)

_OP_PATTERN = re.compile(r"^(\*|[\w*]+::[\w*]+(\.[\w*]+)?)$")
_ARGUMENT = re.compile(r"^\w+$")


def validate(rows) -> list[tuple[str, str]]:
    """The (op, argument) pairs of ``rows``; a malformed row is a ValueError."""
    pairs = []
    for row in rows:
        if not _OP_PATTERN.match(row.op):
            raise ValueError(f"static argument row {row!r}: op must be 'ns::name', "
                             "'ns::name.overload' or a glob of those with '*'")
        if not _ARGUMENT.match(row.argument):
            raise ValueError(f"static argument row {row!r}: argument must be a schema argument name")
        pairs.append((row.op, row.argument))
    return pairs


_added: list[StaticArgument] = []  # rows registered at run time (NKI ops), kept across installs
_installed: list[tuple[str, str]] = []  # the (op, argument) pairs C++ keys by value now


def install(rows=STATIC_ARGUMENTS) -> None:
    """Push the table (and rows added at run time) to C++; cached per-schema masks are recomputed."""
    pairs = validate((*rows, *_added))
    _C._set_static_arguments(pairs)
    _installed[:] = pairs


def static_argument_names(op: str, names) -> set[str]:
    """Which of ``names`` (the schema's argument names of the overload ``op``, e.g.
    ``aten::add.Tensor``) the installed table keys by value: a pattern matches the
    overload or, without one, the op name (C++ resolves the same rows per schema)."""
    base = op.split(".", 1)[0]
    return {arg for pattern, arg in _installed if arg in names
            and (fnmatch.fnmatchcase(op, pattern) or fnmatch.fnmatchcase(base, pattern))}


def add_static_arguments(rows) -> None:
    """Declare more static arguments, e.g. every non-tensor argument of an NKI kernel op: the real
    product compiles an NKI kernel per (shapes, dtypes, non-tensor arguments)."""
    validate(rows)
    _added.extend(rows)
    install()
