"""Lowering ATen FX graphs to StableHLO with torch-mlir, as the real product does.

On Trainium every compiled graph and every eager kernel goes ATen FX →
torch-mlir → StableHLO → neuronx-cc (TR ``python_ops/torch_mlir/kernel.py:808-986``,
``neuron_dynamo_backend/fx/fx_transform.py:184-237``): the graph is put in functional form
(:mod:`.functionalise`), decomposed (:mod:`.decompositions`) and imported. What torch-mlir
cannot lower cannot run there, and the StableHLO text is what identifies a compiled graph
(``compile/cache.py``, ``graph_key``). torch-mlir is an optional dependency (the ``stablehlo``
extra): without it nothing is checked, one warning says so, and callers get ``None`` instead of
a lowering.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import time
import warnings
from typing import Any

import torch

from .decompositions import decomposed
from .errors import LoweringError, summarise_failure
from .functionalise import functional_form

NOT_INSTALLED = (
    "torch-mlir is not installed: graphs and kernels are not lowered to StableHLO, so what would "
    "not compile on Trainium is not checked and graph keys fall back to the FX code. "
    "Install it with: pip install 'torchneuron[stablehlo]'"
)
_warned_missing = False


@dataclasses.dataclass(frozen=True)
class Lowered:
    """One graph in StableHLO: its text (no locations), op count and the host time lowering took."""

    text: str
    op_count: int
    seconds: float


def _installed() -> bool:
    return importlib.util.find_spec("torch_mlir") is not None


def available() -> bool:
    """True when torch-mlir can be imported; warns once (never raises) when it cannot."""
    global _warned_missing
    if _installed():
        return True
    if not _warned_missing:
        _warned_missing = True
        warnings.warn(NOT_INSTALLED, RuntimeWarning, stacklevel=3)
    return False


def count_ops(module: Any) -> int:
    """Number of StableHLO operations in a torch-mlir module (nested regions included)."""
    from torch_mlir import ir

    count = 0

    def visit(op):
        nonlocal count
        if op.name.startswith("stablehlo."):
            count += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count


def lower_fx_graph(gm: torch.fx.GraphModule, name: str = "main", decompose: bool = True) -> Lowered | None:
    """Lower an ATen FX graph (nodes carrying ``meta['val']``) to StableHLO.

    Returns ``None`` when torch-mlir is not installed. Raises
    :class:`LoweringError` with torch-mlir's diagnostics when an op cannot be
    lowered. ``decompose=False`` for a graph already traced with torch-mlir's
    decompositions.
    """
    if not available():
        return None
    from torch_mlir import fx as mlir_fx
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_dialect
    from torch_mlir.extras.fx_importer import FxImporter

    start = time.perf_counter()
    context = ir.Context()
    torch_dialect.register_dialect(context)
    diagnostics: list[str] = []

    def collect(diagnostic) -> bool:
        diagnostics.append(str(diagnostic.message))
        return True  # handled: torch-mlir would otherwise print it on stderr

    context.attach_diagnostic_handler(collect)
    try:
        graph = functional_form(gm)
        module = mlir_fx.stateless_fx_import(
            decomposed(graph) if decompose else graph, output_type="stablehlo", model_name=name,
            fx_importer=FxImporter(context=context),
        )
    except Exception as exc:  # torch-mlir raises its own error types, and Python errors on unknown ops
        raise LoweringError(
            f"torch-mlir could not lower the graph to StableHLO: {summarise_failure(diagnostics, exc)}", diagnostics
        ) from None
    text = str(module)  # the default printer omits locations, as the real key requires
    return Lowered(text=text, op_count=count_ops(module), seconds=time.perf_counter() - start)
