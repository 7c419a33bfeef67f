"""FX passes run before code generation: the static-shape check and the move to CPU.

The emulated device compiler is Inductor's CPU back end, so each AOTAutograd
graph is rewritten to say ``cpu`` wherever it said ``neuron``; the memory it
will run on is still device memory, reached through zero-copy CPU aliases.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.fx.experimental.symbolic_shapes import free_symbols

from ..runtime.extension import _C

DEVICE = "neuron"
_CPU = torch.device("cpu")


class StaticShapeError(RuntimeError):
    """A graph with symbolic sizes reached the backend: Neuron needs static shapes."""


def check_static_shapes(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """Reject symbolic sizes, as neuronx-cc does: one compiled graph per input shape.

    The message opens as the real product's ``DynamicShapeAnalysis`` pass does
    (TR ``neuron_dynamo_backend/fx/passes/dynamic_shape_analysis.py:59-118``) and then
    says what to do.
    """
    dynamic, symbols = [], []
    for node, value in zip(
        (n for n in gm.graph.nodes if n.op == "placeholder"), example_inputs
    ):
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
            isinstance(value, torch.Tensor) and free_symbols(value)
        ):
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else value
            dynamic.append(f"{node.name}: {shape}")
            found = free_symbols(value) if isinstance(value, torch.Tensor) else {value.node.expr}
            symbols.extend(str(s) for s in sorted(found, key=str) if str(s) not in symbols)
    if dynamic:
        raise StaticShapeError(
            "Dynamic shapes detected in the model, but torch-neuronx requires static shapes. "
            f"Found {len(symbols)} dynamic dimension(s): [{', '.join(symbols)}]. "
            f"Symbolic inputs: {', '.join(dynamic)}. Compile with dynamic=False (the default "
            "for backend='neuron'; dynamic=True is not supported), do not call "
            "torch._dynamo.mark_dynamic on inputs, and pad varying sizes to a few fixed "
            "buckets: each distinct shape compiles its own graph."
        )


def _is_device(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == DEVICE
    return isinstance(value, str) and (value == DEVICE or value.startswith(DEVICE + ":"))


def _to_cpu(value: Any) -> Any:
    if _is_device(value):
        return _CPU
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def output_devices(gm: torch.fx.GraphModule) -> list[torch.device | None]:
    """The device of each graph output (None for non-tensors), read before the rewrite."""
    (output,) = (n for n in gm.graph.nodes if n.op == "output")
    values = output.args[0]
    return [
        v.meta["val"].device
        if isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), torch.Tensor)
        else None
        for v in values
    ]


def rewrite_devices_to_cpu(gm: torch.fx.GraphModule) -> None:
    """Make every device argument and tensor constant of ``gm`` a CPU one, in place."""
    for node in gm.graph.nodes:
        node.args = _to_cpu(node.args)
        node.kwargs = {k: _to_cpu(v) for k, v in node.kwargs.items()}
        if node.op == "get_attr":
            owner, _, name = node.target.rpartition(".")
            module = gm.get_submodule(owner) if owner else gm
            value = getattr(module, name)
            if isinstance(value, torch.Tensor) and value.device.type == DEVICE:
                setattr(module, name, _C._cpu_alias(value))
    gm.recompile()


def cpu_fake_inputs(fake_mode, example_inputs: Sequence[Any]) -> list[Any]:
    """Fake CPU twins of the (fake) neuron inputs, same sizes, strides and dtypes."""
    with fake_mode:
        return [
            torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=_CPU)
            if isinstance(x, torch.Tensor) and x.device.type == DEVICE
            else x
            for x in example_inputs
        ]
