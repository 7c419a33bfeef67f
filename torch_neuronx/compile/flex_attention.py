"""FlexAttention on ``neuron``: refused, with what to use instead.

On the real product FlexAttention runs only inside ``torch.compile(backend="neuron")``,
where an FX pass decomposes the ``flex_attention`` higher-order op into ATen ops,
and only after the user patches PyTorch's device check, which admits cuda, cpu,
xpu, hpu and mps (the product's own gpt-oss example does so). Eager calls and
Transformers' ``attn_implementation="flex_attention"`` (which compiles
``flex_attention`` with Inductor) fail there. This emulator does not run
FlexAttention in any mode: its compiled path would go through Inductor's CPU
flex template, which supports neither training nor the log-sum-exp the HOP asks
for, so a graph that compiles here would say nothing about Trainium. PyTorch's
own ``ValueError`` is kept, with a message that names the replacement.
"""
from __future__ import annotations

import functools

import torch

MESSAGE = (
    "FlexAttention is not supported on the neuron device. Use "
    "torch.nn.functional.scaled_dot_product_attention instead (in Transformers: "
    "attn_implementation='sdpa', the default), which runs as one fused attention kernel on "
    "neuron; express masks as an attn_mask tensor (Transformers builds it for you). On Trainium, "
    "flex_attention works only inside torch.compile(backend='neuron'), which this emulator does "
    "not reproduce (docs/compile.md)."
)


def install() -> None:
    """Give ``neuron`` inputs :data:`MESSAGE` in PyTorch's device check of ``flex_attention`` and in
    ``create_block_mask`` (whose mask exists only for FlexAttention; Transformers builds it first,
    with Inductor, so without this its flex path stops at the Inductor refusal instead)."""
    from torch.nn.attention import flex_attention as module

    if getattr(module._validate_device, "_neuron_refusal", False):
        return
    validate_device, create_block_mask = module._validate_device, module.create_block_mask

    @functools.wraps(validate_device)
    def refusing_validate_device(query, key, value):
        if query.device.type == "neuron":
            raise ValueError(MESSAGE)
        return validate_device(query, key, value)

    @functools.wraps(create_block_mask)
    def refusing_create_block_mask(*args, **kwargs):
        device = kwargs.get("device", args[5] if len(args) > 5 else None)
        if device is not None and torch.device(device).type == "neuron":
            raise ValueError(MESSAGE)
        return create_block_mask(*args, **kwargs)

    refusing_validate_device._neuron_refusal = True
    module._validate_device = refusing_validate_device
    module.create_block_mask = refusing_create_block_mask
