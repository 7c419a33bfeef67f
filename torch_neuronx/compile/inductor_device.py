"""What Inductor is handed on ``neuron`` tensors: the neuron backend compiles it.

Trainium has no Inductor; the device's compiler is the ``neuron`` backend. Programs
that compile with PyTorch's default backend (``backend="inductor"``) — TorchTitan
compiles ``flex_attention``, its block masks and, with ``--compile.enable``, each
transformer block that way; Transformers compiles its flex attention so — reach
Inductor through ``compile_fx``. That entry point is wrapped (when Inductor is first
imported): a graph with neuron tensors (an input, or a tensor made inside it) is
compiled by :func:`backend.neuron_backend` instead, with fallback execution on (a
graph that does not lower, e.g. ``create_block_mask``'s sort, runs op by op on the
device, logged and counted in ``compile.fallbacks``), and Inductor's options
(``max_autotune``, ...) are ignored. Graphs on other devices are Inductor's as before.

Inductor's own code generators stay unregistered for ``neuron``: any other path
that reaches them (``compile_fx_inner`` called directly) raises :data:`MESSAGE`.
"""
from __future__ import annotations

import functools

import torch

from ..runtime.import_hooks import after_import
from ..runtime.log import get_logger

_log = get_logger("compile")

MESSAGE = (
    "Inductor's code generators cannot target neuron tensors. Use "
    "torch.compile(model, backend='neuron') (torch.compile's default backend 'inductor' routes "
    "neuron graphs there too): it runs AOTAutograd and Inductor's code generation for the neuron "
    "device (with static shapes and the persistent compile cache)."
)
_TARGET = "torch._inductor.compile_fx"


class _Refuse(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(MESSAGE)


class UnsupportedNeuronCodegen(metaclass=_Refuse):
    """Registered as every Inductor code generator for ``neuron``; any use raises ``MESSAGE``."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(MESSAGE)

    @classmethod
    def create(cls, *args, **kwargs):
        raise NotImplementedError(MESSAGE)


def _on_neuron(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Does the graph take or make neuron tensors (Dynamo records each node's example value)?"""
    values = list(example_inputs) + [n.meta.get("example_value") for n in gm.graph.nodes]
    return any(isinstance(v, torch.Tensor) and v.device.type == "neuron" for v in values)


def _routed(compile_fx):
    @functools.wraps(compile_fx)
    def compile_fx_routing_neuron(model_, example_inputs_, *args, **kwargs):
        if isinstance(model_, torch.fx.GraphModule) and _on_neuron(model_, example_inputs_):
            from .backend import neuron_backend

            _log.info("backend='inductor' on neuron tensors: compiled by the neuron backend "
                      "(fallback execution on; Inductor options ignored)")
            return neuron_backend(model_, example_inputs_, options={"fallback_execution": True})
        return compile_fx(model_, example_inputs_, *args, **kwargs)

    compile_fx_routing_neuron._neuron_routed = True
    return compile_fx_routing_neuron


def _wrap(module) -> None:
    if not getattr(module.compile_fx, "_neuron_routed", False):
        module.compile_fx = _routed(module.compile_fx)


def install() -> None:
    after_import(_TARGET, _wrap)
