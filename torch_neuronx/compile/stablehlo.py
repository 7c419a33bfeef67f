"""Lowering ATen FX graphs to StableHLO with torch-mlir, as the real product does.

On Trainium every compiled graph and every eager kernel goes ATen FX →
torch-mlir → StableHLO → neuronx-cc (TR ``python_ops/torch_mlir/kernel.py:808-986``,
``neuron_dynamo_backend/fx/fx_transform.py:184-237``).
What torch-mlir cannot lower cannot run there, and the StableHLO text is what
identifies a compiled graph. torch-mlir is an optional dependency (the
``stablehlo`` extra): without it nothing is checked, one warning says so, and
callers get ``None`` instead of a lowering.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import operator
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from ..runtime.log import get_logger
from ..runtime.settings import get_flag, get_str

_log = get_logger("stablehlo")
NOT_INSTALLED = (
    "torch-mlir is not installed: graphs and kernels are not lowered to StableHLO, so what would "
    "not compile on Trainium is not checked and graph keys fall back to the FX code. "
    "Install it with: pip install 'torchneuron[stablehlo]'"
)
_warned_missing = False


# Custom ops the real product hands to its compiler as custom calls instead of lowering them
# (NKI kernels: "under torch.compile the kernel becomes one graph node and is compiled with the
# surrounding ops": https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/how-to-work-with-nki.html).
# torch-mlir has no route for them here.
_CUSTOM_CALLS: set[str] = set()


def register_custom_call(op_name: str) -> None:
    """Declare ``op_name`` (``"namespace::name"``) a custom call: not lowered, not a failure."""
    _CUSTOM_CALLS.add(op_name)


def is_custom_call(op_name: str) -> bool:
    """A registered NKI kernel, or one of the emulator's attention kernels (:data:`CUSTOM_KERNELS`)."""
    name = op_name.split(".", 1)[0]
    return name in _CUSTOM_CALLS or name in _CUSTOM_KERNEL_NAMES


def custom_calls_in(gm: torch.fx.GraphModule) -> list[str]:
    """The custom-call ops ``gm`` calls, sorted."""
    # Schema names, not schemas: a FunctionSchema with a List[int] argument is not hashable.
    names = {
        schema.name
        for n in gm.graph.nodes
        if n.op == "call_function" and (schema := getattr(n.target, "_schema", None)) is not None
    }
    return sorted(names & _CUSTOM_CALLS)


class LoweringError(RuntimeError):
    """torch-mlir could not lower a graph to StableHLO; ``diagnostics`` holds its messages.

    ``unsupported`` is True when torch-mlir named what it cannot lower (an op
    or a type): what would fail on Trainium too. False means it failed
    without saying why (an internal error of the pipeline or of our re-trace),
    which says nothing about the graph. ``names_op`` is False when all it
    named is a ``torch.constant.*`` left unconverted: a symptom, whose cause
    (the op that consumed it) is found by lowering the graph's kernels alone.
    """

    def __init__(self, message: str, diagnostics: Sequence[str] = ()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)
        self.unsupported = bool(self.diagnostics)
        self.names_op = any(not name.startswith("torch.constant.") for name in _illegal_ops(self.diagnostics))


@dataclasses.dataclass(frozen=True)
class Lowered:
    """One graph in StableHLO: its text (no locations), op count and the host time lowering took."""

    text: str
    op_count: int
    seconds: float


def _installed() -> bool:
    return importlib.util.find_spec("torch_mlir") is not None


def available() -> bool:
    """True when torch-mlir can be imported; warns once (never raises) when it cannot."""
    global _warned_missing
    if _installed():
        return True
    if not _warned_missing:
        _warned_missing = True
        warnings.warn(NOT_INSTALLED, RuntimeWarning, stacklevel=3)
    return False


def _is_input_write(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and node.args[0].op == "placeholder"
    )


# The emulator's attention kernels (its stand-in for the NKI flash-attention kernels, which are
# custom calls inside a Trainium graph): cut out of the StableHLO, their results become inputs.
# Eager, the same kernels are custom calls too: the real product runs SDPA (forward and
# backward) with its own kernels (NKI flash attention, or its own torch-mlir lowering of
# ``scaled_dot_product_attention``: TR python_ops/torch_mlir/ops/scaled_dot_product_attention.py,
# and ``TORCH_NEURONX_ENABLE_NKI_SDPA`` in
# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html),
# never PyTorch's CPU flash-attention kernel.
CUSTOM_KERNELS = frozenset({
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
})
_CUSTOM_KERNEL_NAMES = frozenset(kernel._schema.name for kernel in CUSTOM_KERNELS)


def _inductor_random_ops() -> tuple[frozenset, frozenset]:
    """Inductor's random primitives (what its decompositions make of dropout and ``rand``)
    and the seed primitives that only feed them."""
    from torch._inductor import inductor_prims

    return (frozenset({inductor_prims.random, inductor_prims.randint}),
            frozenset({inductor_prims.seed, inductor_prims.seeds, inductor_prims.lookup_seed}))


def functional_form(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` that StableHLO can express: values in, tensors out.

    Rewrites the real product also makes before lowering (its
    ``mutation_info`` and ``none_output_info``): a write into an input
    (``copy_(input, value)``, how AOTAutograd keeps input mutations) becomes an
    extra output aliased to that input, and outputs that are not tensors
    (``None`` gradients of inputs that need none) are dropped. A device move
    (``x.cpu()`` in the graph) is the identity: StableHLO has one device. A
    :data:`CUSTOM_KERNELS` call is cut out: its tensor arguments become
    outputs and its results inputs, as around a custom call. Random numbers
    (Inductor's ``random``/``randint``, what its decompositions make of dropout)
    are inputs, as the real product passes the dropout mask drawn on the host
    into its graph (TR ``neuron_dynamo_backend/utils/stablehlo_utils.py:122-134``); their
    seeds go.
    """
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    extra_outputs: list[torch.fx.Node] = []
    nodes = list(gm.graph.nodes)
    random_ops, seed_ops = _inductor_random_ops()
    for node in nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node, lambda n: env[n])
    for kernel in (n for n in nodes if n.op == "call_function" and n.target in CUSTOM_KERNELS):
        for user in kernel.users:
            result = graph.placeholder(f"{user.name}_from_kernel")
            result.meta["val"] = user.meta.get("val")
            env[user] = result
    for draw in (n for n in nodes if n.op == "call_function" and n.target in random_ops):
        env[draw] = graph.placeholder(f"{draw.name}_from_host")
        env[draw].meta["val"] = draw.meta.get("val")
    for node in nodes:
        if node.op == "placeholder" or node in env or (node.op == "call_function" and node.target in seed_ops):
            continue
        if node.op == "call_function" and node.target is torch.ops.prims.device_put.default:
            env[node] = env[node.args[0]]
        elif node.op == "call_function" and node.target in CUSTOM_KERNELS:
            extra_outputs.extend(env[a] for a in node.all_input_nodes)
        elif _is_input_write(node):
            env[node] = env[node.args[1]]
            extra_outputs.append(env[node])
        elif node.op == "output":
            values = node.args[0] if isinstance(node.args[0], (list, tuple)) else (node.args[0],)
            kept = [
                env[v] for v in values
                if isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), torch.Tensor)
            ]
            graph.output(tuple(kept + [w for w in dict.fromkeys(extra_outputs) if w not in kept]))
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    return torch.fx.GraphModule(gm, graph)


def count_ops(module: Any) -> int:
    """Number of StableHLO operations in a torch-mlir module (nested regions included)."""
    from torch_mlir import ir

    count = 0

    def visit(op):
        nonlocal count
        if op.name.startswith("stablehlo."):
            count += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count


_ILLEGAL_OP = re.compile(r"failed to legalize operation '([^']+)'")
_OPERATOR_NAME = re.compile(r'<\{name = "([^"]+)"')


def _illegal_ops(diagnostics: Sequence[str]) -> list[str]:
    """The ops torch-mlir's diagnostics say it failed to legalize, in order."""
    illegal = []
    for message in diagnostics:
        match = _ILLEGAL_OP.search(message)
        if match:
            named = _OPERATOR_NAME.search(message) if match.group(1) == "torch.operator" else None
            illegal.append(named.group(1) if named else match.group(1))
    return illegal


def _summary(diagnostics: Sequence[str], exc: BaseException) -> str:
    """The op torch-mlir could not lower, e.g. ``no lowering for torch.aten.erfinv``.

    Constants left behind by an op that did not lower are named only when no
    op is (they are a symptom, not the cause).
    """
    illegal = _illegal_ops(diagnostics)
    if illegal:
        causes = [name for name in illegal if not name.startswith("torch.constant.")] or illegal
        return f"no lowering for {causes[0]}"
    text = "; ".join(d for d in diagnostics if "backend contract" not in d) or str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def fake_cpu_twins(values: Sequence[Any]) -> list[Any]:
    """Fake CPU tensors with the sizes, strides and dtypes of the tensors in ``values``
    (other values unchanged): tracing inputs that cost no memory and sit on one device."""
    with FakeTensorMode():
        return [
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="cpu") if isinstance(v, torch.Tensor) else v
            for v in values
        ]


def _view_as_reshape(tensor: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return torch.ops.aten._unsafe_view.default(tensor.contiguous(), size)


def _slice_scatter_in_bounds(base, src, dim=0, start=None, end=None, step=1):
    """``slice_scatter`` with ``start``/``end`` clamped to the dimension, as PyTorch reads them.

    A slice "to the end" carries ``end = 2**63 - 1`` (the backward of ``x[..., n:]``,
    e.g. Llama's ``rotate_half``). torch-mlir 20261001 lowers ``slice_scatter`` to a
    ``stablehlo.scatter`` whose index constant it builds from ``start`` to the
    unclamped ``end``: the lowering allocated memory until the process was killed
    (17 GB on a tiny Llama's backward graph). Same values, bounded indices.
    """
    lo, hi, _ = slice(start, end, step).indices(base.shape[dim])
    hi = max(hi, lo)  # an empty slice, as PyTorch clamps it
    if (start, end) == (lo, hi):
        return NotImplemented  # already in bounds: trace the op itself
    return torch.ops.aten.slice_scatter.default(base, src, dim, lo, hi, step)


def _fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``prims.fma`` as ``a * b + c`` in the operands' dtype.

    An Inductor-only primitive: the AOTAutograd decompositions this backend shares
    with Inductor (``select_decomp_table``) write ``_softmax_backward_data`` with it,
    so every eager-attention backward graph holds one. The real product traces with
    its own decompositions, which never produce it; torch-mlir has no lowering.
    The product's compiler may contract the pair into one FMA; the StableHLO
    check and the graph key only need the operation.
    """
    return a * b + c


def _rev_as_flip(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """``prims.rev`` as ``aten.flip``, which torch-mlir lowers (``stablehlo.reverse``).

    Inductor's decomposition table, which this backend shares, writes ``flip`` (Mamba-2's and
    Falcon-H1's chunked scans) as the primitive; the real product traces with its own table,
    and ``flip`` is a core ATen op that PyTorch's core decompositions keep."""
    return torch.ops.aten.flip.default(a, dims)


def histc_by_scatter_add(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    """``aten.histc`` as a scatter-add of ones into ``bins`` counters, which torch-mlir lowers.

    The real product's compile table decomposes ``histc`` the same way
    (TR ``neuron_dynamo_backend/decompositions.py:1827-1868``, in the table its backend passes to
    ``aot_autograd``, ``:1889-1898``), so the MoE routers' token counts lower on Trainium. The
    bins follow PyTorch's CPU kernel: ``min == max`` takes the data's range (widened by 1 on each
    side when the data is constant), a value's bin is ``(v - min) / (max - min) * bins``, ``max``
    itself falls in the last bin, values outside are not counted. Integer inputs (the token counts)
    are binned in float64, exactly, and counted in their own dtype. In the AOTAutograd table of
    ``backend="neuron"`` too (:func:`backend.aot_decompositions`): the graph Inductor runs on the
    host then counts integers as the device kernel does (PyTorch's CPU ``histc`` takes no integers)."""
    values = x.reshape(-1) if x.is_floating_point() else x.reshape(-1).to(torch.float64)
    if min == max:
        low, high = torch.aminmax(values)
        constant = low == high
        low, high = torch.where(constant, low - 1, low), torch.where(constant, high + 1, high)
    else:
        low, high = float(min), float(max)
    inside = (values >= low) & (values <= high)
    position = ((values - low) / (high - low) * bins).to(torch.int64).clamp(0, bins - 1)
    counts = torch.zeros(bins, dtype=torch.int64, device=x.device)
    return counts.scatter_add(0, position, inside.to(torch.int64)).to(x.dtype)


def _conv1d_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                     output_padding, groups, output_mask):
    """``convolution_backward`` of a 1-D convolution (Mamba's causal conv1d, depthwise) as
    convolutions, slices and a matmul, which torch-mlir lowers; it fails on the op itself
    (``torch.constant.int`` left). The real product's compile table decomposes it into
    convolutions too (TR ``neuron_dynamo_backend/decompositions.py:1615-1801``). Other
    convolutions keep the op (``NotImplemented``)."""
    if transposed or input.dim() != 3:
        return NotImplemented
    (s,), (p,), (d,) = stride, padding, dilation
    taps, steps = weight.shape[-1], grad_output.shape[-1]
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:  # the transposed convolution, padded back to the input's length
        covered = (steps - 1) * s - 2 * p + d * (taps - 1) + 1
        grad_input = torch.ops.aten.convolution.default(
            grad_output, weight, None, [s], [p], [d], True, [input.shape[-1] - covered], groups)
    if output_mask[1]:  # each tap's input window against the output gradient, per group
        n, channels, _ = input.shape
        padded = torch.nn.functional.pad(input, (p, p))
        windows = torch.stack([padded[:, :, k * d: k * d + s * (steps - 1) + 1: s] for k in range(taps)], dim=-1)
        windows = windows.reshape(n, groups, channels // groups, steps, taps)
        per_group = grad_output.reshape(n, groups, -1, steps)
        grad_weight = torch.einsum("ngitk,ngot->goik", windows, per_group).reshape(weight.shape)
    if output_mask[2]:
        grad_bias = grad_output.sum((0, 2))
    return grad_input, grad_weight, grad_bias


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


def _foreach_decompositions() -> dict:
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


def _scalar_as_tensor(tensor_form: torch._ops.OpOverload) -> Callable[[torch.Tensor, Any], torch.Tensor]:
    """An op's Scalar form as its Tensor form with a 0-dim operand of the result dtype.

    torch-mlir 20261001 lowers ``fmod.Tensor`` but leaves the Python-scalar operand
    of ``fmod.Scalar`` unconverted ("failed to legalize torch.constant.int"), and
    has no pattern for the Scalar forms of the bitwise ops: a defect of the
    converter, not an op Trainium lacks (the same op with a tensor operand
    lowers). Mistral's and Gemma's sliding-window cache index with ``fmod``.
    """
    def as_tensor(x: torch.Tensor, scalar: Any) -> torch.Tensor:
        dtype = torch.result_type(x, scalar)  # a wrapped number's promotion, kept by a 0-dim tensor
        return tensor_form(x, torch.ops.aten.scalar_tensor.default(scalar, dtype=dtype))

    return as_tensor


def _topk_sorted(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """``topk(sorted=False)`` as ``topk(sorted=True)``: torch-mlir 20261001 lowers only the
    sorted form and leaves the ``False`` flag unconverted; "unsorted" leaves the order to the
    kernel, so a sorted result is a valid one (MoE routers of GLM-4 MoE, DeepSeek-V3 pass False).
    """
    if sorted:
        return NotImplemented  # already the form torch-mlir lowers: trace the op itself
    return torch.ops.aten.topk.default(x, k, dim, largest, True)


_SCALAR_FORMS = {
    torch.ops.aten.fmod.Scalar: torch.ops.aten.fmod.Tensor,
    torch.ops.aten.bitwise_or.Scalar: torch.ops.aten.bitwise_or.Tensor,
    torch.ops.aten.bitwise_xor.Scalar: torch.ops.aten.bitwise_xor.Tensor,
    torch.ops.aten.bitwise_left_shift.Tensor_Scalar: torch.ops.aten.bitwise_left_shift.Tensor,
    torch.ops.aten.bitwise_right_shift.Tensor_Scalar: torch.ops.aten.bitwise_right_shift.Tensor,
}


@functools.cache
def _graph_op_decompositions() -> dict:
    """What Dynamo and AOTAutograd put in a graph that torch-mlir's table leaves alone:
    Inductor's ``prims.fma``, ``prims.rev``, ``histc``, 1-D ``convolution_backward``, the foreach ops,
    unsorted ``topk`` and the Scalar forms of
    :data:`_SCALAR_FORMS`."""
    from torch._inductor import inductor_prims

    return {**_foreach_decompositions(), inductor_prims.fma: _fma, torch.ops.prims.rev.default: _rev_as_flip,
            torch.ops.aten.histc.default: histc_by_scatter_add, torch.ops.aten.topk.default: _topk_sorted,
            torch.ops.aten.convolution_backward.default: _conv1d_backward,
            **{scalar: _scalar_as_tensor(tensor) for scalar, tensor in _SCALAR_FORMS.items()}}


def torch_mlir_decompositions() -> dict:
    """torch-mlir's decomposition table, which its FX route applies before import
    (``export_and_import``), with ``slice_scatter`` bounds clamped (:func:`_slice_scatter_in_bounds`)
    and the graph ops of :func:`_graph_op_decompositions`: for graphs and eager kernels alike (an
    eager ``slice_backward`` decomposes to ``slice_scatter``, an eager optimizer step calls foreach ops)."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    return {**get_decomposition_table(), **_graph_op_decompositions(),
            torch.ops.aten.slice_scatter.default: _slice_scatter_in_bounds}


def _decomposition_table() -> dict:
    table = {**torch_mlir_decompositions(), torch.ops.aten.view.default: _view_as_reshape}
    table.pop(torch.ops.aten._unsafe_view.default)  # it decomposes into view: keep it, torch-mlir lowers it
    return table


def _view_as_reshape_node(graph: torch.fx.Graph, node: torch.fx.Node, env: dict) -> torch.fx.Node:
    """:func:`_view_as_reshape` written as nodes: a view is the most common node of a graph,
    and tracing each one alone would cost more than the rest of the lowering."""
    source, size = node.args
    value = source.meta["val"]
    operand = env[source]
    if not value.is_contiguous():
        operand = graph.call_function(torch.ops.aten.clone.default, (operand,),
                                      {"memory_format": torch.contiguous_format})
        operand.meta["val"] = value
    reshaped = graph.call_function(torch.ops.aten._unsafe_view.default, (operand, size))
    reshaped.meta["val"] = node.meta["val"]
    return reshaped


def trace_call(target: Any, args: Sequence[Any], kwargs: dict, is_input: Callable[[Any], bool],
               table: dict, value: Callable[[Any], Any] = lambda leaf: leaf,
               functional: bool = False) -> tuple[torch.fx.GraphModule, list]:
    """An ATen graph of one ``target(*args, **kwargs)`` call with ``table``'s decompositions.

    The argument leaves ``is_input`` selects become the graph's inputs, traced on
    fake CPU twins of ``value(leaf)`` (no memory, one device); every other argument
    is baked in. ``functional`` turns in-place ops into their functional forms.
    Returns the graph and the input leaves, in placeholder order.
    """
    flat, spec = pytree.tree_flatten((args, kwargs))
    positions = [i for i, leaf in enumerate(flat) if is_input(leaf)]

    def call(*inputs):
        leaves = list(flat)
        for i, t in zip(positions, inputs):
            leaves[i] = t
        call_args, call_kwargs = pytree.tree_unflatten(leaves, spec)
        return target(*call_args, **call_kwargs)

    fn = torch.func.functionalize(call, remove="mutations_and_views") if functional else call
    gm = make_fx(fn, decomposition_table=table, tracing_mode="fake")(
        *fake_cpu_twins([value(flat[i]) for i in positions]))
    return gm, [flat[i] for i in positions]


def _inline_decomposition(graph: torch.fx.Graph, node: torch.fx.Node, table: dict, env: dict) -> Any:
    """Trace ``node``'s decomposition alone and copy it into ``graph``; returns what stands
    for the node's result (a node, or a tuple of them)."""
    sub, inputs = trace_call(node.target, node.args, node.kwargs, lambda a: isinstance(a, torch.fx.Node),
                             table, value=lambda n: n.meta["val"])
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    result = graph.graph_copy(sub.graph, {p: env[n] for p, n in zip(placeholders, inputs)})
    return tuple(result) if isinstance(result, (list, tuple)) else result


def decomposed(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with torch-mlir's decompositions applied, which its FX route applies before
    import (``export_and_import``); the real product likewise decomposes in AOTAutograd.

    Only the nodes the table names are traced (each alone, on fake inputs); the
    others are copied: re-tracing a whole graph cost seconds per graph, and an
    AOTAutograd graph has few such nodes (a tiny Llama's backward: 14 of 351).
    Views become reshapes: a decomposed op (the math form of the attention
    kernel) may return other strides than the kernel the graph was traced with,
    and StableHLO has no strides anyway.
    """
    table = _decomposition_table()
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.view.default:
            env[node] = _view_as_reshape_node(graph, node, env)
        elif node.op == "call_function" and node.target in table:
            env[node] = _inline_decomposition(graph, node, table, env)
        elif (node.op == "call_function" and node.target is operator.getitem
              and isinstance(env.get(node.args[0]), tuple)):
            env[node] = env[node.args[0]][node.args[1]]
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    return torch.fx.GraphModule(gm, graph)


def lower_fx_graph(gm: torch.fx.GraphModule, name: str = "main", decompose: bool = True) -> Lowered | None:
    """Lower an ATen FX graph (nodes carrying ``meta['val']``) to StableHLO.

    Returns ``None`` when torch-mlir is not installed. Raises
    :class:`LoweringError` with torch-mlir's diagnostics when an op cannot be
    lowered. ``decompose=False`` for a graph already traced with torch-mlir's
    decompositions.
    """
    if not available():
        return None
    from torch_mlir import fx as mlir_fx
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_dialect
    from torch_mlir.extras.fx_importer import FxImporter

    start = time.perf_counter()
    context = ir.Context()
    torch_dialect.register_dialect(context)
    diagnostics: list[str] = []

    def collect(diagnostic) -> bool:
        diagnostics.append(str(diagnostic.message))
        return True  # handled: torch-mlir would otherwise print it on stderr

    context.attach_diagnostic_handler(collect)
    try:
        graph = functional_form(gm)
        module = mlir_fx.stateless_fx_import(
            decomposed(graph) if decompose else graph, output_type="stablehlo", model_name=name,
            fx_importer=FxImporter(context=context),
        )
    except Exception as exc:  # torch-mlir raises its own error types, and Python errors on unknown ops
        raise LoweringError(
            f"torch-mlir could not lower the graph to StableHLO: {_summary(diagnostics, exc)}", diagnostics
        ) from None
    text = str(module)  # the default printer omits locations, as the real key requires
    return Lowered(text=text, op_count=count_ops(module), seconds=time.perf_counter() - start)


def _describe(values: Sequence[Any]) -> list[str]:
    return [
        f"{tuple(v.shape)}:{v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__ for v in values
    ]


def graph_key(text: str, inputs: Sequence[Any], outputs: Sequence[Any], compiler: dict) -> str:
    """sha256 of the StableHLO text, the I/O shapes and dtypes and the compiler configuration.

    The real product's graph key (``stablehlo_utils.py:14-56``, ``compile.py:97-113``)
    with its compiler suffix (target, LNC, ``-O2``, ``NEURON_CC_FLAGS``).
    """
    digest = hashlib.sha256(text.encode())
    digest.update(json.dumps({"in": _describe(inputs), "out": _describe(outputs),
                              "compiler": compiler}, sort_keys=True).encode())
    return digest.hexdigest()


def debug_dir() -> Path:
    """``TORCH_NEURONX_DEBUG_DIR``, else ``<tmp>/neuron_backend`` (the real product's default)."""
    return Path(get_str("TORCH_NEURONX_DEBUG_DIR") or Path(tempfile.gettempdir()) / "neuron_backend")


def preserve_artifacts() -> bool:
    return get_flag("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS")


def write_artifact(graph_name: str, text: str) -> Path | None:
    """Keep a graph's StableHLO where the real product keeps it, when artifacts are preserved.

    Layout: ``<debug dir>/stablehlo/proc_<rank>/<graph name>.stablehlo.mlir``
    (the real product writes MLIR bytecode named by a timestamp; we write text
    named by the graph, which is unique per process).
    """
    if not preserve_artifacts():
        return None
    directory = debug_dir() / "stablehlo" / f"proc_{get_str('RANK') or '0'}"
    path = directory / f"{graph_name.lower()}.stablehlo.mlir"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        _log.warning("StableHLO of %s not written to %s: %s", graph_name, path, exc)
        return None
    return path
