"""The ``neuron`` Dynamo backend: AOTAutograd, our FX passes, Inductor's CPU code generation.

Pipeline per Dynamo graph (the real product's, with Inductor standing in for
neuronx-cc): reject symbolic shapes; AOTAutograd traces forward and backward
separately on the ``neuron`` tensors (so autograd, input mutation and output
aliasing are handled on the real device tensors); each resulting graph is
rewritten to CPU and compiled by ``compile_fx_inner`` (whose FX graph cache is
the persistent compile cache); the compiled code runs on CPU aliases of the
device memory and its outputs are adopted back as ``neuron`` tensors.
"""
from __future__ import annotations

import copy
import functools
import time
import warnings
from typing import Any, Callable, Sequence

import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend
from torch._dynamo.utils import counters
from torch._functorch.aot_autograd import make_boxed_func
from torch._guards import CompileContext, detect_fake_mode
from torch._inductor import config as inductor_config
from torch._inductor.compile_fx import compile_fx_inner, partition_fn
from torch._inductor.decomposition import select_decomp_table
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ..runtime import cache_dirs, settings
from ..runtime.errors import first_line
from ..runtime.log import get_logger
from . import device_interface, passes
from .metrics import METRICS, GraphRecord
from .aliased_execution import alias_runner

_log = get_logger("compile")


class NEFFCompilationError(RuntimeError):
    """The device compiler failed on a graph (name as in the real product)."""


def fallback_enabled() -> bool:
    """``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0`` runs graphs that fail to compile eagerly."""
    return not settings.get_flag("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")


def _force_static_shapes() -> None:
    """Neuron compiles one graph per shape: a new shape must recompile statically, not go symbolic."""
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.assume_static_by_default = True


def _cache_counts() -> tuple[int, int]:
    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def _compile_aot_graph(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, is_inference: bool, is_backward: bool
) -> Callable[[list], list]:
    """Compile one forward/backward/inference graph for the emulated device."""
    start = time.perf_counter()
    hits, misses = _cache_counts()
    eager_graph = copy.deepcopy(gm) if fallback_enabled() else None
    try:
        devices = passes.output_devices(gm)
        passes.rewrite_devices_to_cpu(gm)
        fake_mode = detect_fake_mode(example_inputs)
        cpu_inputs = passes.cpu_fake_inputs(fake_mode, example_inputs)
        FakeTensorProp(gm, mode=fake_mode).propagate_dont_convert_inputs(*cpu_inputs)
        with inductor_config.patch(fx_graph_cache=cache_dirs.persistent_cache_enabled() and inductor_config.fx_graph_cache):
            compiled = compile_fx_inner(
                gm, cpu_inputs, is_inference=is_inference, is_backward=is_backward
            )
        runner = alias_runner(compiled, devices)
    except Exception as exc:
        if eager_graph is None:
            raise
        _note_fallback(exc)
        runner = make_boxed_func(eager_graph.forward)
    new_hits, new_misses = _cache_counts()
    # Forward graphs are compiled inside neuron_backend, which times them with AOTAutograd's
    # tracing; a backward graph is compiled later, on the first backward().
    seconds = time.perf_counter() - start if is_backward else 0.0
    METRICS.add_compile(seconds, new_hits - hits, new_misses - misses)
    return runner


def _note_fallback(exc: Exception) -> None:
    """Fallback execution: the graph will run uncompiled, op by op, on the device."""
    message = first_line(exc)
    _log.warning("graph compilation failed, running it eagerly (fallback execution): %s", message)
    METRICS.add_fallback(message)


_aot_neuron = aot_autograd(
    fw_compiler=functools.partial(_compile_aot_graph, is_inference=False, is_backward=False),
    bw_compiler=functools.partial(_compile_aot_graph, is_inference=False, is_backward=True),
    inference_compiler=functools.partial(_compile_aot_graph, is_inference=True, is_backward=False),
    decompositions=select_decomp_table(),
    partition_fn=partition_fn,
    keep_inference_input_mutations=True,
)


def _check_mode_and_options(mode: str | None, options: dict | None) -> None:
    if mode not in (None, "default"):
        warnings.warn(
            f"torch.compile(backend='neuron') supports only mode='default'; mode={mode!r} is "
            "ignored and the default mode is used.",
            stacklevel=3,
        )
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options for backend='neuron' must be a dict or None, got {type(options).__name__}")
    if options:
        warnings.warn(
            f"backend='neuron' ignores compile options {sorted(options)}", stacklevel=3
        )


def _graph_record(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> GraphRecord:
    compile_id = CompileContext.current_compile_id()
    reason = getattr(gm, "compile_subgraph_reason", None)
    return GraphRecord(
        compile_id=str(compile_id),
        inputs=[
            f"{tuple(x.shape)} {x.dtype} {x.device}" for x in example_inputs if isinstance(x, torch.Tensor)
        ],
        recompile=bool(compile_id and compile_id.frame_compile_id),
        graph_break_reason=reason.reason if reason is not None and reason.graph_break else None,
    )


def neuron_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: str | None = None,
    options: dict | None = None,
) -> Callable[..., Any]:
    """Dynamo backend ``"neuron"``: compile ``gm`` for the (emulated) NeuronCore."""
    _check_mode_and_options(mode, options)
    _force_static_shapes()
    passes.check_static_shapes(gm, example_inputs)
    record = _graph_record(gm, example_inputs)
    start = time.perf_counter()
    try:
        compiled = _aot_neuron(gm, example_inputs)
    except Exception as exc:
        if not fallback_enabled():
            raise NEFFCompilationError(
                f"torch.compile(backend='neuron') failed to compile graph {record.compile_id}: {exc}. "
                "Set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 to run graphs that fail to "
                "compile eagerly instead."
            ) from exc
        _note_fallback(exc)
        compiled = gm.forward
    record.compile_seconds = time.perf_counter() - start
    METRICS.add_graph(record)
    return compiled


device_interface.register()
# Loaded through the entry point, Dynamo registers the name itself right after import.
if "neuron" not in _COMPILER_FNS and _BACKENDS.get("neuron") is None:
    register_backend(neuron_backend, name="neuron")
