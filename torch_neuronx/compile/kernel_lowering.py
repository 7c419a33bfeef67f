"""Lowering single eager kernels to StableHLO, as the real product does for every eager op.

On Trainium an eager ATen op is traced with ``make_fx``, functionalised and
lowered through torch-mlir to StableHLO before neuronx-cc compiles it (TR
``python_ops/torch_mlir/kernel.py:808-986``); an op that does not lower has no
Neuron kernel and runs on the CPU (TR ``csrc/core/NeuronBindings.cpp:232-246``).
:func:`lower_kernel` does that for one kernel signature on ``meta`` tensors
(no data, no device); :class:`KernelLoweringCollector` lowers
each *new* signature once and reports, per op, what would fall back to CPU.
It is opt-in (``TORCHNEURON_LOWER_EAGER=1`` or :func:`set_eager_lowering`):
lowering costs milliseconds per new signature, and nothing per repeat.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .. import accounting
from ..runtime.errors import first_line
from ..runtime.settings import get_flag, get_str
from .lowering import custom_calls, decompositions, lower
from .lowering.errors import LoweringError
from .lowering.functionalise import functional_form

NOT_CHECKED = "not checked (torch-mlir is not installed)"


def eager_lowering_enabled() -> bool:
    """``TORCHNEURON_LOWER_EAGER=1`` turns on lowering of each new eager kernel signature."""
    return get_flag("TORCHNEURON_LOWER_EAGER")


@dataclasses.dataclass(frozen=True)
class LoweringResult:
    """Whether one kernel signature lowers to StableHLO.

    ``lowered`` is None when nothing was checked (torch-mlir absent, or it
    failed without naming an op);
    ``stage`` says where a failure happened: ``"resolve"`` (no such op),
    ``"trace"`` (make_fx/functionalisation: e.g. a data-dependent output shape)
    or ``"lower"`` (torch-mlir has no lowering).
    """

    op: str
    lowered: bool | None
    stablehlo_op_count: int | None = None
    stage: str | None = None
    reason: str | None = None
    seconds: float = 0.0


def resolve_op(op: str) -> torch._ops.OpOverload:
    """``"aten::add.Tensor"`` → ``torch.ops.aten.add.Tensor`` (``"aten::relu"`` → ``.default``)."""
    namespace, sep, rest = op.partition("::")
    if not sep or not rest:
        raise ValueError(f"kernel name {op!r} is not of the form 'namespace::name[.overload]'")
    name, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
    except (AttributeError, RuntimeError) as exc:
        raise ValueError(f"no operator {op!r}: {exc}") from None


def split_by_schema(overload: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A boxed call (every argument positional, as the dispatcher's stack holds them)
    split into the positional and keyword-only arguments the Python overload accepts."""
    schema = overload._schema.arguments
    if len(args) <= sum(1 for a in schema if not a.kwarg_only):
        return args, kwargs
    positional, keywords = [], dict(kwargs)
    for spec, value in zip(schema, args):
        if spec.kwarg_only:
            keywords.setdefault(spec.name, value)
        else:
            positional.append(value)
    return tuple(positional), keywords


def as_meta(value: Any) -> Any:
    """``value`` with every tensor replaced by a ``meta`` tensor of the same size, strides and dtype."""
    return pytree.tree_map_only(
        torch.Tensor,
        lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta"),
        value,
    )


def _trace(overload: torch._ops.OpOverload, args: tuple, kwargs: dict) -> torch.fx.GraphModule:
    """A functional ATen graph of one call, tensors as inputs and everything else baked in
    (traced on fake CPU twins of the meta inputs: no memory, and ops that copy trace)."""
    gm, _ = decompositions.trace_call(overload, args, kwargs, lambda v: isinstance(v, torch.Tensor),
                                 decompositions.torch_mlir_decompositions(), functional=True)
    return gm


def _resize_outputs(overload: torch._ops.OpOverload, args: tuple, kwargs: dict) -> None:
    """Give ``out=`` buffers the result's shape by running the op's meta kernel on the meta arguments.

    The eager path hands an out-variant kernel an empty buffer that the kernel resizes; the real
    product lowers the computation, not the resize, so the buffer is traced at its final shape."""
    if not overload._schema.is_mutable:
        return
    try:
        overload(*args, **kwargs)
    except Exception:  # no meta kernel: trace as called, the lowering reports what fails
        pass


def lower_kernel(op: str, args: tuple, kwargs: dict | None = None) -> LoweringResult:
    """Lower one kernel signature (``op`` like ``"aten::add.Tensor"``, tensors on ``meta``)."""
    start = time.perf_counter()
    if not lower.available():
        return LoweringResult(op, None, reason=NOT_CHECKED)
    if custom_calls.is_custom_call(op):
        return LoweringResult(op, None, reason="a custom call (an NKI kernel, or the emulator's attention "
                                               "kernel standing in for the real product's own): not "
                                               "lowered through StableHLO")
    try:
        overload = resolve_op(op)
    except ValueError as exc:
        return LoweringResult(op, False, stage="resolve", reason=str(exc))
    args, kwargs = split_by_schema(overload, tuple(args), dict(kwargs or {}))
    args, kwargs = as_meta(args), as_meta(kwargs)
    _resize_outputs(overload, args, kwargs)
    try:
        gm = _trace(overload, args, kwargs)
    except Exception as exc:  # any tracing failure means the real product cannot build a kernel
        return LoweringResult(op, False, stage="trace", reason=first_line(exc, limit=300),
                              seconds=time.perf_counter() - start)
    try:
        lowered = lower.lower_fx_graph(gm, name=op.replace("::", "_").replace(".", "_"), decompose=False)
    except LoweringError as exc:  # not ``unsupported``: nothing is known (lowered=None)
        return LoweringResult(op, False if exc.unsupported else None, stage="lower", reason=str(exc),
                              seconds=time.perf_counter() - start)
    return LoweringResult(op, True, stablehlo_op_count=lowered.op_count,
                          seconds=time.perf_counter() - start)


def kernels_not_lowering(gm: torch.fx.GraphModule) -> list[LoweringResult]:
    """Each distinct kernel signature of an ATen graph lowered alone; those that do not lower.

    When torch-mlir fails on a whole graph without naming a cause, the op
    responsible is found the way eager kernels are checked, one signature at
    a time, on the graph as it is lowered: its functional form (custom kernels
    cut out, device moves gone) with torch-mlir's decompositions applied and
    views as reshapes (a ``view`` alone, on a strided input, is not what the
    graph lowers). Views are skipped: alone, a view returns an alias of its
    input, which a value-semantics StableHLO function cannot (torch-mlir leaves
    their dimension constants unconverted); inside a graph they lower.
    """
    failing, seen = [], set()
    for node in decompositions.decomposed(functional_form(gm)).graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target.is_view:
            continue
        args, kwargs = pytree.tree_map_only(torch.fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs))
        signature = (node.target, repr(as_meta((args, kwargs))))
        if signature in seen:
            continue
        seen.add(signature)
        result = lower_kernel(node.target.name(), args, kwargs)
        if result.lowered is False and result.stage == "lower":
            failing.append(result)
    return failing


class KernelLoweringCollector:
    """Lowers each new kernel signature once and reports per op.

    ``on_signature(op, key, args)`` is shaped for the eager path's new-signature
    listener: ``key`` identifies the signature (a repeat costs a dict lookup),
    ``args`` are the call's arguments (device tensors are described as
    ``meta`` before tracing).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: dict[Any, LoweringResult] = {}  # the cache: every signature ever lowered
        self._seen: set[Any] = set()  # signatures reported since the last forget_seen()

    def on_signature(self, op: str, key: Any, args: tuple, kwargs: dict | None = None) -> LoweringResult:
        with self._lock:
            known = self._results.get(key)
            if known is not None:
                self._seen.add(key)
                return known
        result = lower_kernel(op, args, kwargs)
        with self._lock:
            self._seen.add(key)
            return self._results.setdefault(key, result)

    def stablehlo_sizes(self, keys: Iterable[Any]) -> dict[Any, int | None]:
        """The StableHLO op count of each of ``keys`` that was lowered; None for one that was not."""
        with self._lock:
            return {k: self._results[k].stablehlo_op_count if k in self._results and self._results[k].lowered
                    else None for k in set(keys)}

    def forget_seen(self) -> None:
        """Restart the report; lowered signatures stay cached and are not lowered again."""
        with self._lock:
            self._seen.clear()

    def clear(self) -> None:
        with self._lock:
            self._results.clear()
            self._seen.clear()

    def report(self, keys: Iterable[Any] | None = None) -> dict:
        """Per-op summary: kernels lowered, ops that would fall back to CPU (or, under
        ``TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1``, fail), with the reason; of the
        signatures seen since the last ``forget_seen()``, or of ``keys`` (each counted once)."""
        with self._lock:
            results = [self._results[k] for k in (self._seen if keys is None else set(keys)) if k in self._results]
        verdict = "would fail" if fallback_only_for_unimplemented() else "would fall back to CPU"
        stablehlo_ops: dict[str, int] = defaultdict(int)
        fall_back: dict[str, str] = {}
        for r in results:
            if r.lowered:
                stablehlo_ops[r.op] += r.stablehlo_op_count or 0
            elif r.lowered is False:
                fall_back.setdefault(r.op, f"{verdict} ({r.stage}): {r.reason}")
        return {
            "checked": any(r.lowered is not None for r in results) or not results,
            "signatures": len(results),
            "signatures_lowered": sum(1 for r in results if r.lowered),
            "signatures_not_lowered": sum(1 for r in results if r.lowered is False),
            "stablehlo_ops_per_op": dict(sorted(stablehlo_ops.items())),
            "ops_lowered": sorted(stablehlo_ops),
            "ops_not_lowered": sorted(fall_back),
            "fallback_only_for_unimplemented_ops": fallback_only_for_unimplemented(),
            "would_fall_back_to_cpu": dict(sorted(fall_back.items())),
            "lowering_seconds": sum(r.seconds for r in results),
        }


def fallback_only_for_unimplemented() -> bool:
    """The product's strictness switch (TR ``python_ops/base.py:715-717``): exactly ``"1"`` turns a failure of an
    implemented op into an error instead of a CPU fallback; release builds default to ``"0"``.
    Every op of the emulator has a device kernel, so an op that does not lower is such a failure."""
    return get_str("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS") == "1"


# --- the eager opt-in: one process-wide collector fed by the new-signature listener ---

_collector = KernelLoweringCollector()
_listening = False
_switch_lock = threading.Lock()


def _on_new_signature(op: str, key: str, args: tuple) -> None:
    _collector.on_signature(op, key, args)


def set_eager_lowering(enabled: bool) -> None:
    """Lower every new eager kernel signature from now on (or stop); what was lowered stays reported."""
    global _listening
    with _switch_lock:
        if enabled and not _listening:
            accounting.add_signature_listener(_on_new_signature)
        elif not enabled and _listening:
            accounting.remove_signature_listener(_on_new_signature)
        _listening = bool(enabled)


def eager_lowering_active() -> bool:
    return _listening


def eager_lowering_report(keys: Iterable[str] | None = None) -> dict:
    """The ``lowering`` section of ``torch_neuronx.metrics()``: ``enabled`` plus the collector's
    report (of the signatures ``keys``, each once, when given)."""
    return {"enabled": _listening, **_collector.report(keys)}


def stablehlo_sizes(keys: Iterable[str]) -> dict[str, int | None]:
    """Each eager kernel signature's StableHLO op count where it was lowered, else None."""
    return _collector.stablehlo_sizes(keys)


def reset_eager_lowering() -> None:
    """Restart the report with ``reset_metrics()``; lowered signatures stay cached."""
    _collector.forget_seen()


def install() -> None:
    """Connect the eager opt-in at import when ``TORCHNEURON_LOWER_EAGER=1``; add the metrics section."""
    accounting.add_metrics_section("lowering", eager_lowering_report, reset_eager_lowering)
    if eager_lowering_enabled():
        set_eager_lowering(True)
