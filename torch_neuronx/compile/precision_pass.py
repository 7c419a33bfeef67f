"""The chip's precision rules in a compiled graph: the compiler's auto-cast and device casts.

neuronx-cc compiles a graph with ``--auto-cast=none`` followed by ``NEURON_CC_FLAGS``
(TR ``csrc/core/KernelExecution.cpp:151-169``), so a user's ``--auto-cast matmult`` makes
its FP32 matmuls compute in the auto-cast type, and ``all`` every FP32 operation; casts
to a narrow dtype round stochastically when the runtime says so. Inductor's CPU code does
neither, so before code generation this pass rounds the graph's values with the ops of
``numerics/rounding_ops.py``: the FP32 operands of TensorE ops (the matrices, not biases)
under ``matmult``; every FP32 input and output under ``all``; when stochastic rounding is on,
every cast to bf16/fp16/fp8 and every bf16/fp16 result computed from narrow inputs (in FP32, then
rounded). Results returned as lists (foreach ops) round to nearest.
The same rules as eager kernels (``csrc/numerics/Precision.cpp``).
"""
from __future__ import annotations

import torch
from torch._ops import OpOverload

from ..numerics import compiler_flags, precision, rounding, rounding_ops  # noqa: F401  (registers the ops)
from ..projection.kernel import tensor_engine_ops

_CASTS = {torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default}
_NARROW = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)
_ROUNDS = {torch.ops.torchneuron.round_to_cast_type.default}
_WIDENED = (torch.bfloat16, torch.float16)


def _fp32(node) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dtype == torch.float32


def _operands(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The matrices of a TensorE op: its FP32 tensor inputs of 2-D and up, less a bias or the
    ``self`` that addmm/baddbmm add after the product."""
    schema = node.target._schema
    names = {a.name for a in schema.arguments}
    skip = {"bias"} | ({"self"} if names & {"mat1", "batch1", "mat"} else set())
    out = []
    for arg, value in zip(schema.arguments, node.args):
        if arg.name not in skip and _fp32(value) and value.meta["val"].dim() >= 2:
            out.append(value)
    return out


def _insert(graph: torch.fx.Graph, op, args: tuple, val) -> torch.fx.Node:
    new = graph.call_function(op, args)
    new.meta["val"] = val
    return new


def _round_inputs(graph, node, inputs, cast_type: int) -> None:
    for value in dict.fromkeys(inputs):
        with graph.inserting_before(node):
            rounded = _insert(graph, torch.ops.torchneuron.round_to_cast_type.default, (value, cast_type),
                              value.meta["val"])
        node.replace_input_with(value, rounded)


def _round_output(graph, node, cast_type: int) -> None:
    with graph.inserting_after(node):
        rounded = _insert(graph, torch.ops.torchneuron.round_to_cast_type.default, (node, cast_type),
                          node.meta["val"])
    node.replace_all_uses_with(rounded, delete_user_cb=lambda user: user is not rounded)


def _cast_as_device(graph, node) -> None:
    dtype = node.args[1] if node.target is torch.ops.prims.convert_element_type.default else node.kwargs["dtype"]
    with graph.inserting_after(node):
        cast = _insert(graph, torch.ops.torchneuron.cast_as_device.default, (node.args[0], dtype), node.meta["val"])
    node.replace_all_uses_with(cast)
    graph.erase_node(node)


def _device_cast(node) -> bool:
    if node.target not in _CASTS or not isinstance(node.args[0], torch.fx.Node):
        return False
    dtype = node.args[1] if node.target is torch.ops.prims.convert_element_type.default else node.kwargs.get("dtype")
    source = node.args[0].meta.get("val")
    return (dtype in _NARROW and isinstance(source, torch.Tensor) and source.is_floating_point()
            and source.dtype != dtype and set(node.kwargs) <= {"dtype"})


def _computes_narrow(node) -> bool:
    """A node writing a bf16/fp16 value computed from narrow floating inputs: under stochastic
    rounding it computes in FP32 and rounds its result, as a NeuronCore engine does. Random ops
    (host ops on the real product), views and mutating ops are left alone."""
    val = node.meta.get("val")
    op = node.target
    if not isinstance(val, torch.Tensor) or val.dtype not in _WIDENED or op._schema.is_mutable or op.is_view:
        return False
    if torch.Tag.nondeterministic_seeded in op.tags:
        return False
    return any(isinstance(a.meta.get("val"), torch.Tensor) and a.meta["val"].dtype in _WIDENED
               for a in node.all_input_nodes)


def _compute_in_fp32(graph, node) -> None:
    for value in dict.fromkeys(a for a in node.all_input_nodes if a.meta["val"].dtype in _WIDENED):
        with graph.inserting_before(node):
            wide = _insert(graph, torch.ops.prims.convert_element_type.default, (value, torch.float32),
                           value.meta["val"].to(torch.float32))
        node.replace_input_with(value, wide)
    dtype = node.meta["val"].dtype
    with graph.inserting_after(node):
        cast = _insert(graph, torch.ops.torchneuron.cast_as_device.default, (node, dtype), node.meta["val"])
    node.replace_all_uses_with(cast, delete_user_cb=lambda user: user is not cast)


def apply(gm: torch.fx.GraphModule) -> bool:
    """Round ``gm``'s values as the chip would under the flags and rounding mode in force; whether
    anything changed. Casts and narrow results round as the device does only if stochastic
    rounding is on when the graph compiles: an opaque op would keep Inductor from fusing them, and
    the runtime's switch is set before a job starts."""
    flags = precision.flags()
    stochastic = rounding.state()[0]
    cast_type = compiler_flags.AUTO_CAST_TYPES.index(flags.auto_cast_type)
    tensor_engine = tensor_engine_ops() if flags.auto_cast == "matmult" else frozenset()
    graph, changed = gm.graph, False
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, OpOverload):
            continue
        if stochastic and _device_cast(node):
            _cast_as_device(graph, node)
            changed = True
            continue
        if flags.auto_cast == "all" and not node.target._schema.is_mutable:
            inputs = [a for a in node.all_input_nodes if _fp32(a) and a.target not in _ROUNDS]
            _round_inputs(graph, node, inputs, cast_type)
            if _fp32(node):
                _round_output(graph, node, cast_type)
            changed = changed or bool(inputs) or _fp32(node)
        elif node.target._schema.name in tensor_engine:
            operands = _operands(node)
            _round_inputs(graph, node, operands, cast_type)
            changed = changed or bool(operands)
        if stochastic and _computes_narrow(node):
            _compute_in_fp32(graph, node)
            changed = True
    if changed:
        graph.lint()
        gm.recompile()
    return changed
