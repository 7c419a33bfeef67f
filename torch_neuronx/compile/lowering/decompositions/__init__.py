"""Every decomposition of the project, and how a graph or a single call takes them.

Three tables, each for one purpose:

- :func:`aot_decompositions`: what AOTAutograd decomposes for ``backend="neuron"`` (Inductor's
  table plus the real product's ``histc`` and ``index_put``), so the graph Inductor runs on the host
  and the graph lowered hold the same ops;
- :func:`torch_mlir_decompositions`: torch-mlir's own table plus the rewrites of
  :func:`graph_op_decompositions` (ops Dynamo, AOTAutograd or an optimizer put in a graph that
  torch-mlir leaves alone), for compiled graphs and eager kernels alike;
- :func:`lowering_table`: the latter with views as reshapes, what :func:`decomposed` applies to a
  graph node by node before it is lowered.

The rewrites themselves: ``graph_ops`` (single ops), ``foreach`` (``_foreach_*``), ``index_put``
(the product's compile-only ``index_put``) and ``complex_values`` (a graph's complex values as real
pairs, ``TORCH_NEURONX_COMPLEX_DECOMPOSE``).
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from . import graph_ops
from .foreach import foreach_decompositions
from .index_put import index_put_as_scatter


@functools.cache
def graph_op_decompositions() -> dict:
    """What Dynamo and AOTAutograd put in a graph that torch-mlir's table leaves alone:
    Inductor's ``prims.fma``, ``prims.rev``, ``histc``, 1-D ``convolution_backward``, the foreach ops,
    unsorted ``topk`` and the Scalar forms of
    :data:`graph_ops.SCALAR_FORMS`."""
    from torch._inductor import inductor_prims

    return {**foreach_decompositions(), inductor_prims.fma: graph_ops.fma,
            torch.ops.prims.rev.default: graph_ops.rev_as_flip,
            torch.ops.aten.histc.default: graph_ops.histc_by_scatter_add,
            torch.ops.aten.topk.default: graph_ops.topk_sorted,
            torch.ops.aten.convolution_backward.default: graph_ops.conv1d_backward,
            **{scalar: graph_ops.scalar_as_tensor(tensor) for scalar, tensor in graph_ops.SCALAR_FORMS.items()}}


def torch_mlir_decompositions() -> dict:
    """torch-mlir's decomposition table, which its FX route applies before import
    (``export_and_import``), with ``slice_scatter`` bounds clamped (:func:`graph_ops.slice_scatter_in_bounds`)
    and the graph ops of :func:`graph_op_decompositions`: for graphs and eager kernels alike (an
    eager ``slice_backward`` decomposes to ``slice_scatter``, an eager optimizer step calls foreach ops)."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    return {**get_decomposition_table(), **graph_op_decompositions(),
            torch.ops.aten.slice_scatter.default: graph_ops.slice_scatter_in_bounds}


def lowering_table() -> dict:
    """What a graph is decomposed with before import: :func:`torch_mlir_decompositions` with views
    as reshapes (:func:`decomposed` writes those as nodes)."""
    table = {**torch_mlir_decompositions(), torch.ops.aten.view.default: graph_ops.view_as_reshape}
    table.pop(torch.ops.aten._unsafe_view.default)  # it decomposes into view: keep it, torch-mlir lowers it
    return table


def aot_decompositions() -> dict:
    """What AOTAutograd decomposes: Inductor's table (this backend runs Inductor's code generation),
    plus the real product's ``histc`` (TR ``neuron_dynamo_backend/decompositions.py:1827-1868``)
    and its compile-only ``index_put`` (``:1889-1898``; ``_unsafe_index_put`` is ``index_put``
    in both tables), so that the graph run on the host and the graph lowered hold the same scatters."""
    from torch._inductor.decomposition import select_decomp_table

    return {**select_decomp_table(), torch.ops.aten.histc.default: graph_ops.histc_by_scatter_add,
            torch.ops.aten.index_put.default: index_put_as_scatter,
            torch.ops.aten._unsafe_index_put.default: index_put_as_scatter}


def fake_cpu_twins(values: Sequence[Any]) -> list[Any]:
    """Fake CPU tensors with the sizes, strides and dtypes of the tensors in ``values``
    (other values unchanged): tracing inputs that cost no memory and sit on one device."""
    with FakeTensorMode():
        return [
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="cpu") if isinstance(v, torch.Tensor) else v
            for v in values
        ]


def _view_as_reshape_node(graph: torch.fx.Graph, node: torch.fx.Node, env: dict) -> torch.fx.Node:
    """:func:`graph_ops.view_as_reshape` written as nodes: a view is the most common node of a graph,
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
    table = lowering_table()
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
