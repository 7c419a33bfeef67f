"""A graph in the form StableHLO expresses: values in, tensors out (the real product's rewrites)."""
from __future__ import annotations

import torch

from .custom_calls import CUSTOM_KERNELS


def _is_input_write(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and node.args[0].op == "placeholder"
    )


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
