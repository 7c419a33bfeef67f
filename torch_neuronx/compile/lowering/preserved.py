"""Each compiled graph's StableHLO kept where the real product keeps it, when asked to."""
from __future__ import annotations

import tempfile
from pathlib import Path

from ...runtime.log import get_logger
from ...runtime.settings import get_flag, get_str

_log = get_logger("stablehlo")


def debug_dir() -> Path:
    """``TORCH_NEURONX_DEBUG_DIR``, else ``<tmp>/neuron_backend`` (the real product's default)."""
    return Path(get_str("TORCH_NEURONX_DEBUG_DIR") or Path(tempfile.gettempdir()) / "neuron_backend")


def preserve_artifacts() -> bool:
    return get_flag("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS")


def write_artifact(graph_name: str, text: str) -> Path | None:
    """Keep a graph's StableHLO where the real product keeps it, when artifacts are preserved.

    Layout: ``<debug dir>/stablehlo/proc_<rank>/<graph name>.stablehlo.mlir``
    (the real product writes MLIR bytecode named by a timestamp; we write text
    named by the graph, which is unique per process).
    """
    if not preserve_artifacts():
        return None
    directory = debug_dir() / "stablehlo" / f"proc_{get_str('RANK') or '0'}"
    path = directory / f"{graph_name.lower()}.stablehlo.mlir"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        _log.warning("StableHLO of %s not written to %s: %s", graph_name, path, exc)
        return None
    return path
