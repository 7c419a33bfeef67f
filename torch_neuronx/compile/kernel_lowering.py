"""Lowering single eager kernels to StableHLO, as the real product does for every eager op.

On Trainium an eager ATen op is traced with ``make_fx``, functionalised and
lowered through torch-mlir to StableHLO before neuronx-cc compiles it (notes
§1); an op that does not lower has no Neuron kernel and runs on the CPU
(notes §4). :func:`lower_kernel` does that for one kernel signature on
``meta`` tensors (no data, no device); :class:`KernelLoweringCollector` lowers
each *new* signature once and reports, per op, what would fall back to CPU.
It is opt-in (``TORCHNEURON_LOWER_EAGER=1``): lowering costs milliseconds per
new signature.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from ..runtime.settings import get_flag
from . import stablehlo

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


def as_meta(value: Any) -> Any:
    """``value`` with every tensor replaced by a ``meta`` tensor of the same size, strides and dtype."""
    return pytree.tree_map_only(
        torch.Tensor,
        lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta"),
        value,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _trace(overload: torch._ops.OpOverload, args: tuple, kwargs: dict) -> torch.fx.GraphModule:
    """A functional ATen graph of one call, tensors as inputs and everything else baked in."""
    flat, spec = pytree.tree_flatten((args, kwargs))
    positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]

    def call(*tensors):
        values = list(flat)
        for i, t in zip(positions, tensors):
            values[i] = t
        call_args, call_kwargs = pytree.tree_unflatten(values, spec)
        return overload(*call_args, **call_kwargs)

    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    traced = make_fx(
        torch.func.functionalize(call, remove="mutations_and_views"),
        decomposition_table=get_decomposition_table(),
        tracing_mode="fake",
    )
    # Fake CPU twins of the meta inputs: no memory, and ops that copy (``_to_copy``) trace.
    return traced(*stablehlo.fake_cpu_twins([flat[i] for i in positions]))


def lower_kernel(op: str, args: tuple, kwargs: dict | None = None) -> LoweringResult:
    """Lower one kernel signature (``op`` like ``"aten::add.Tensor"``, tensors on ``meta``)."""
    start = time.perf_counter()
    if not stablehlo.available():
        return LoweringResult(op, None, reason=NOT_CHECKED)
    try:
        overload = resolve_op(op)
    except ValueError as exc:
        return LoweringResult(op, False, stage="resolve", reason=str(exc))
    try:
        gm = _trace(overload, as_meta(tuple(args)), as_meta(dict(kwargs or {})))
    except Exception as exc:  # any tracing failure means the real product cannot build a kernel
        return LoweringResult(op, False, stage="trace", reason=_first_line(exc),
                              seconds=time.perf_counter() - start)
    try:
        lowered = stablehlo.lower_fx_graph(gm, name=op.replace("::", "_").replace(".", "_"), decompose=False)
    except stablehlo.LoweringError as exc:  # not ``unsupported``: nothing is known (lowered=None)
        return LoweringResult(op, False if exc.unsupported else None, stage="lower", reason=str(exc),
                              seconds=time.perf_counter() - start)
    return LoweringResult(op, True, stablehlo_op_count=lowered.op_count,
                          seconds=time.perf_counter() - start)


class KernelLoweringCollector:
    """Lowers each new kernel signature once and reports per op.

    ``on_signature(op, key, args)`` is shaped for the eager path's new-signature
    listener: ``key`` identifies the signature (a repeat costs a dict lookup),
    ``args`` are the call's arguments (device tensors are described as
    ``meta`` before tracing).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: dict[Any, LoweringResult] = {}

    def on_signature(self, op: str, key: Any, args: tuple, kwargs: dict | None = None) -> LoweringResult:
        with self._lock:
            known = self._results.get(key)
        if known is not None:
            return known
        result = lower_kernel(op, args, kwargs)
        with self._lock:
            return self._results.setdefault(key, result)

    def clear(self) -> None:
        with self._lock:
            self._results.clear()

    def report(self) -> dict:
        """Per-op summary: kernels lowered, ops that would fall back to CPU (with the reason)."""
        with self._lock:
            results = list(self._results.values())
        stablehlo_ops: dict[str, int] = defaultdict(int)
        fall_back: dict[str, str] = {}
        for r in results:
            if r.lowered:
                stablehlo_ops[r.op] += r.stablehlo_op_count or 0
            elif r.lowered is False:
                fall_back.setdefault(r.op, f"would fall back to CPU ({r.stage}): {r.reason}")
        return {
            "checked": any(r.lowered is not None for r in results) or not results,
            "signatures": len(results),
            "signatures_lowered": sum(1 for r in results if r.lowered),
            "signatures_not_lowered": sum(1 for r in results if r.lowered is False),
            "stablehlo_ops_per_op": dict(sorted(stablehlo_ops.items())),
            "would_fall_back_to_cpu": dict(sorted(fall_back.items())),
            "lowering_seconds": sum(r.seconds for r in results),
        }
