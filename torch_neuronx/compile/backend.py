"""The ``neuron`` Dynamo backend: AOTAutograd, our FX passes, StableHLO, Inductor's CPU code generation.

Pipeline per Dynamo graph (the real product's, with Inductor standing in for
neuronx-cc): reject symbolic shapes; copy CPU inputs to the device; AOTAutograd
traces forward and backward separately on the ``neuron`` tensors (so autograd,
input mutation and output aliasing are handled on the real device tensors);
each resulting graph is rewritten to CPU, lowered to StableHLO by torch-mlir
(what does not lower fails, as it would on Trainium; its text is the graph
key), and compiled by ``compile_fx_inner`` (whose FX graph cache is the
persistent compile cache); the compiled code runs on CPU aliases of the device
memory and its outputs are adopted back as ``neuron`` tensors.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.logging_utils import get_aot_graph_name
from torch._functorch.aot_autograd import make_boxed_func
from torch._guards import CompileContext, detect_fake_mode
from torch._inductor import config as inductor_config
from torch._inductor.compile_fx import compile_fx_inner, partition_fn
from torch._inductor.fx_passes.post_grad import view_to_reshape
from torch._inductor.virtualized import V
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ..accounting import projected
from ..runtime.errors import first_line
from ..runtime.log import get_logger
from ..runtime.settings import get_flag
from . import artifacts, cache, device_interface, kernel_lowering, passes
from .aliased_execution import alias_runner
from ..projection import graph_compile_seconds
from .dynamo_metrics import METRICS, GraphRecord, NeuronCompilationMetrics
from .lowering import custom_calls, lower, preserved
from .lowering.decompositions import aot_decompositions, complex_values
from .lowering.errors import LoweringError
from .scatter_reinplace import scatters_reinplaced
from .tile2d_atomic_add import corrected_cpu_codegen

_log = get_logger("compile")
artifacts.install()  # Inductor's artefacts degrade instead of breaking the job (compile/artifacts.py)


class NEFFCompilationError(RuntimeError):
    """A graph could not be lowered or compiled (the real product raises a RuntimeError)."""


SETUP_FAILED = "Neuron backend NEFF execution setup failed with unexpected error: {}"
_KNOWN_OPTIONS = ("fallback_execution", "model_name")
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclasses.dataclass(frozen=True)
class _Settings:
    """What one ``torch.compile`` call asked for, read once per Dynamo graph."""

    model_name: str
    fallback: bool


def fallback_enabled(options: dict | None = None) -> bool:
    """Run a graph that fails to lower or compile eagerly instead of raising?

    The ``fallback_execution`` compile option wins; otherwise
    ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION`` decides, default True (no
    fallback) as in the Neuron 2.33 docs (the April source defaulted to False:
    TR ``neuron_dynamo_backend/backend.py:232-242``).
    """
    if options and options.get("fallback_execution") is not None:
        return bool(options["fallback_execution"])
    return not get_flag("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")


def _force_static_shapes() -> None:
    """Neuron compiles one graph per shape: a new shape must recompile statically, not go symbolic."""
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.assume_static_by_default = True


def _cache_counts() -> tuple[int, int]:
    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def _has_collectives(gm: torch.fx.GraphModule) -> bool:
    return any(
        node.op == "call_function" and any(c in str(node.target) for c in _COLLECTIVES)
        for node in gm.graph.nodes
    )


def _graph_outputs(gm: torch.fx.GraphModule) -> list[Any]:
    (output,) = (n for n in gm.graph.nodes if n.op == "output")
    return [v.meta.get("val") if isinstance(v, torch.fx.Node) else v for v in output.args[0]]


def _graph_compiler_config() -> dict:
    """The compiler suffix of a compiled graph's key: the eager one at ``-O2``
    (TR ``torch_neuronx/csrc/core/KernelExecution.cpp:24-57``, ``NeuronCompiler.cpp:235-256``)."""
    from ..accounting.signatures import compiler_config

    topology = torch.neuron.topology()
    return {**compiler_config(topology.profile.family, topology.lnc), "opt_level": "-O2"}


def _us_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e6


def _lower(gm: torch.fx.GraphModule, record: NeuronCompilationMetrics) -> lower.Lowered | None:
    """``gm`` in StableHLO; None when not checked (switched off, torch-mlir absent or failing
    without a cause). When torch-mlir fails without naming an op (or names only a constant it
    left unconverted), the graph's kernels are lowered one by one: one that does not lower
    alone fails the graph, named."""
    if not get_flag("TORCHNEURON_LOWER_GRAPHS"):
        record.lowering = "not checked (TORCHNEURON_LOWER_GRAPHS=0)"
        return None
    if get_flag("TORCH_NEURONX_COMPLEX_DECOMPOSE") and complex_values.has_complex_values(gm):
        gm = complex_values.as_real_pairs(gm)  # the graph lowered only: Inductor runs the complex one
    calls = custom_calls.custom_calls_in(gm)
    if calls:
        record.lowering = (f"not checked (custom calls {', '.join(calls)}: the real product "
                           "compiles NKI kernels with the graph; torch-mlir has no route for them)")
        return None
    try:
        return lower.lower_fx_graph(gm)  # function "main": the key must not depend on the AOT counter
    except LoweringError as exc:
        if exc.unsupported and exc.names_op:
            raise
        failing = kernel_lowering.kernels_not_lowering(gm)
        if failing:
            raise LoweringError(
                f"{failing[0].reason} (found by lowering {failing[0].op} alone: the whole graph failed "
                "without naming an op)", [r.reason for r in failing]
            ) from None
        _log.warning("graph %s not checked for StableHLO: %s", record.graph_name, exc)
        record.lowering = "not checked (torch-mlir failed without naming an op; each op lowers alone)"
        return None


def _lower_and_account(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], record: NeuronCompilationMetrics
) -> None:
    """StableHLO of ``gm`` (already on CPU), its graph key, artifact and cache outcome, into ``record``."""
    lowered = _lower(gm, record)
    if lowered is not None:
        record.torch_neuronx_lower_us = lowered.seconds * 1e6
        record.stablehlo_op_count = lowered.op_count
        record.lowering = "lowered"
        preserved.write_artifact(record.graph_name, lowered.text)
    text = lowered.text if lowered is not None else gm.code
    compiler = _graph_compiler_config()
    record.graph_id = cache.graph_key(text, example_inputs, _graph_outputs(gm), compiler)
    record.neff_cache = cache.claim_graph(
        record.graph_id, {"op": record.graph_name, "signature": "compiled graph", "compiler": compiler}
    )
    if record.neff_cache == "compiled":
        record.estimated_compile_s = graph_compile_seconds(record.stablehlo_op_count, record.graph_node_count)


# Our Inductor changes are module state, saved on entry and restored on exit: two of our compiles
# overlapping in different threads (a backward compiled lazily on an autograd worker while another
# thread compiles a forward) would restore each other's saved state, dropping a change mid-compile
# or leaving it installed for good. One compile at a time holds them.
_INDUCTOR_CHANGES = threading.RLock()


@contextlib.contextmanager
def _our_inductor() -> Iterator[None]:
    """Inductor as our graphs are compiled by: the persistent cache setting and our two CPU
    code-generation changes, held by one thread at a time."""
    with (
        _INDUCTOR_CHANGES,
        inductor_config.patch(fx_graph_cache=cache.persistent() and inductor_config.fx_graph_cache),
        corrected_cpu_codegen(),
        scatters_reinplaced(),
    ):
        yield


def _compile_aot_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    settings: _Settings,
    is_inference: bool,
    is_backward: bool,
) -> Callable[[list], list]:
    """Lower one forward/backward/inference graph to StableHLO, then compile it for the emulated device."""
    start = time.perf_counter()
    hits, misses = _cache_counts()
    eager_graph = copy.deepcopy(gm) if settings.fallback else None
    record = NeuronCompilationMetrics(
        graph_id="",
        graph_name=f"{settings.model_name}_{get_aot_graph_name().split('__', 1)[-1]}",
        model_name=settings.model_name,
        has_collectives=_has_collectives(gm),
        graph_node_count=len(gm.graph.nodes),
        timestamp=time.time(),
    )
    try:
        devices = passes.output_devices(gm)
        # What Inductor does before its own fake propagation: a backward graph's saved activations
        # can arrive with other strides than the trace gave them (Mamba's scan, a convolution's
        # output laid out channels-last by Inductor), so a view may not apply; the projection's
        # trace (which calls the module's code: hence the recompile) and the host's propagation
        # below both need the reshapes.
        view_to_reshape(gm)
        gm.recompile()
        executed = projected.add_graph(record.graph_name, gm, example_inputs)  # before the CPU rewrite
        passes.rewrite_devices_to_cpu(gm)
        record.torch_neuronx_fx_passes_us = _us_since(start)
        _lower_and_account(gm, example_inputs, record)
        codegen_start = time.perf_counter()
        fake_mode = detect_fake_mode(example_inputs)
        cpu_inputs = passes.cpu_fake_inputs(fake_mode, example_inputs)
        FakeTensorProp(gm, mode=fake_mode).propagate_dont_convert_inputs(*cpu_inputs)
        with _our_inductor():
            compiled = compile_fx_inner(
                gm, cpu_inputs, is_inference=is_inference, is_backward=is_backward
            )
        record.torch_neuronx_compile_us = _us_since(codegen_start)
        runner = alias_runner(compiled, devices, executed, lazy_views=[
            i for i, v in enumerate(_graph_outputs(gm)) if isinstance(v, torch.Tensor) and (v.is_conj() or v.is_neg())])
    except Exception as exc:
        if eager_graph is None:
            raise NEFFCompilationError(SETUP_FAILED.format(exc)) from exc
        _note_fallback(exc)
        runner = make_boxed_func(eager_graph.forward)
    else:
        counters["neuron"]["compiled_graphs"] += 1
        counters["neuron"]["graphs_with_collectives"] += record.has_collectives
        METRICS.add_compiled_graph(record)
    new_hits, new_misses = _cache_counts()
    # Forward graphs are compiled inside neuron_backend, which times them with AOTAutograd's
    # tracing; a backward graph is compiled later, on the first backward().
    seconds = time.perf_counter() - start if is_backward else 0.0
    METRICS.add_compile(seconds, new_hits - hits, new_misses - misses)
    return runner


def _note_fallback(exc: Exception) -> None:
    """Fallback execution: the graph runs uncompiled, op by op, on the device (the real messages)."""
    message = first_line(exc)
    _log.error("Execution failed: %s", message)
    _log.warning("Falling back to original GraphModule execution")
    METRICS.add_fallback(message)


def _aot_neuron(settings: _Settings) -> Callable:
    compiler = functools.partial(_compile_aot_graph, settings=settings)
    return aot_autograd(
        fw_compiler=functools.partial(compiler, is_inference=False, is_backward=False),
        bw_compiler=functools.partial(compiler, is_inference=False, is_backward=True),
        inference_compiler=functools.partial(compiler, is_inference=True, is_backward=False),
        decompositions=aot_decompositions(),
        partition_fn=partition_fn,
        keep_inference_input_mutations=True,
    )


def _settings(mode: str | None, options: dict | None) -> _Settings:
    if mode not in (None, "default"):
        # The real backend's message, on each backend call (TR neuron_dynamo_backend/backend.py:289-293).
        _log.warning("Neuron backend does not support mode='%s', falling back to default mode.", mode)
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options for backend='neuron' must be a dict or None, got {type(options).__name__}")
    options = options or {}
    unknown = sorted(set(options) - set(_KNOWN_OPTIONS))
    if unknown:
        warnings.warn(f"backend='neuron' ignores compile options {unknown}", stacklevel=3)
    return _Settings(model_name=str(options.get("model_name", "model_default")),
                     fallback=fallback_enabled(options))


def _copy_cpu_inputs_to_device(
    example_inputs: Sequence[Any],
) -> tuple[list[Any], list[int]]:
    """CPU tensor inputs are copied to the device, as the real executor does
    (TR ``neuron_dynamo_backend/executor.py:95-112``);
    ``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1`` makes them an error instead.

    0-dim CPU tensors stay where they are: PyTorch lets them mix with device
    tensors as scalars, and an in-place update of one (an optimizer's ``step``)
    must stay visible to the caller.
    """
    on_cpu = [
        i for i, x in enumerate(example_inputs)
        if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() > 0
    ]
    if not on_cpu:
        return list(example_inputs), []
    if get_flag("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"):
        raise RuntimeError(
            f"Input tensor at index {on_cpu[0]} is on cpu device, expected neuron. "
            "Move tensor to Neuron device first with tensor.to('neuron')"
        )
    device = torch.device("neuron", torch.neuron.current_device())
    inputs = list(example_inputs)
    for i in on_cpu:
        inputs[i] = inputs[i].to(device)
    return inputs, on_cpu


def _with_inputs_on_device(compiled: Callable[..., Any], indices: list[int]) -> Callable[..., Any]:
    device = torch.device("neuron", torch.neuron.current_device())

    def run(*args):
        args = [a.to(device) if i in indices else a for i, a in enumerate(args)]
        return compiled(*args)

    return run


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
    settings = _settings(mode, options)
    _force_static_shapes()
    passes.check_static_shapes(gm, example_inputs)
    record = _graph_record(gm, example_inputs)
    inputs, copied = _copy_cpu_inputs_to_device(example_inputs)
    start = time.perf_counter()
    try:
        # Inductor's joint-graph passes (its partitioner's) read the fake mode from V, as inside
        # compile_fx: without it, fusing the seeds of a graph with dropout fails.
        with V.set_fake_mode(detect_fake_mode(inputs)):
            compiled = _aot_neuron(settings)(gm, inputs)
    except Exception as exc:
        if not settings.fallback:
            if isinstance(exc, NEFFCompilationError):
                raise
            raise NEFFCompilationError(SETUP_FAILED.format(exc)) from exc
        _note_fallback(exc)
        compiled = gm.forward
    if copied:
        compiled = _with_inputs_on_device(compiled, copied)
    record.compile_seconds = time.perf_counter() - start
    METRICS.add_graph(record)
    return compiled


device_interface.register()
# Loaded through the entry point, Dynamo registers the name itself right after import.
if "neuron" not in _COMPILER_FNS and _BACKENDS.get("neuron") is None:
    register_backend(neuron_backend, name="neuron")
