"""FlexAttention on ``neuron``: compiled, decomposed into ATen ops; refused eagerly.

On the real product (TR ``neuron_dynamo_backend/fx/passes/flex_attention_legalization.py``)
FlexAttention runs only inside ``torch.compile(backend="neuron")``, where an FX pass
decomposes the ``flex_attention`` higher-order op into ATen ops. The compiler here does
the same: :func:`decompose` gives each ``flex_attention`` node PyTorch's own dense
implementation of the op (``math_attention``: scores, ``score_mod`` and ``mask_mod`` vmapped
over them, safe softmax, log-sum-exp), which AOTAutograd differentiates like any other
ATen graph, so training works and nothing runs Inductor's CPU flex template (inference
only, no log-sum-exp). ``backend="inductor"`` on neuron tensors compiles with this
backend too (``inductor_device.py``): TorchTitan and Transformers compile
``flex_attention`` and ``create_block_mask`` that way.

PyTorch's device check admits only cuda, cpu, xpu, hpu and mps, so on Trainium the user
patches ``flex_attention._validate_device`` first (the product's gpt-oss example does);
here neuron inputs pass it while the op is being compiled. Called eagerly on neuron,
``flex_attention`` raises a ``ValueError`` with :data:`MESSAGE`, as it fails on
Trainium.
"""
from __future__ import annotations

import functools

import torch

MESSAGE = (
    "FlexAttention on the neuron device runs only inside torch.compile (backend 'neuron', or the "
    "default 'inductor', which compiles neuron graphs with it): the compiler decomposes it into "
    "ATen ops, as on Trainium. Wrap the call in torch.compile, or use "
    "torch.nn.functional.scaled_dot_product_attention (in Transformers: "
    "attn_implementation='sdpa', the default), which runs as one fused attention kernel on neuron "
    "(docs/compile.md, 'FlexAttention')."
)


def install() -> None:
    """Let ``neuron`` inputs through PyTorch's device check of ``flex_attention`` while it is
    compiled; eagerly, raise :data:`MESSAGE`."""
    from torch.nn.attention import flex_attention as module

    if getattr(module._validate_device, "_neuron_check", False):
        return
    validate_device = module._validate_device

    @functools.wraps(validate_device)
    def validate_device_for_neuron(query, key, value):
        if query.device.type == "neuron":
            if torch.compiler.is_compiling():
                return
            raise ValueError(MESSAGE)
        return validate_device(query, key, value)

    validate_device_for_neuron._neuron_check = True
    module._validate_device = validate_device_for_neuron


def dense_flex_attention(query, key, value, score_mod, block_mask, scale, kernel_options,
                         score_mod_other_buffers=(), mask_mod_other_buffers=()):
    """The ``flex_attention`` higher-order op's results (output, log-sum-exp and row maxima, the
    last two in base 2) from PyTorch's dense implementation, in differentiable ATen ops."""
    from torch._higher_order_ops.flex_attention import math_attention

    return math_attention(query, key, value, score_mod, block_mask, scale, kernel_options,
                          score_mod_other_buffers, mask_mod_other_buffers)


def decompose(gm: torch.fx.GraphModule) -> int:
    """Replace each ``flex_attention`` higher-order op in ``gm`` (a Dynamo graph) and in the
    subgraphs it holds (an activation-checkpointed region is one) by
    :func:`dense_flex_attention`; returns how many were replaced."""
    from torch._higher_order_ops.flex_attention import flex_attention

    replaced = 0
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        nodes = [n for n in module.graph.nodes if n.op == "call_function" and n.target is flex_attention]
        for node in nodes:
            node.target = dense_flex_attention
        if nodes:
            module.recompile()
            replaced += len(nodes)
    return replaced
