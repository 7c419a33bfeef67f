"""Ops a graph leaves to the compiler as custom calls: neither lowered nor a failure."""
from __future__ import annotations

import torch


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
