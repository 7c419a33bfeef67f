"""Where compiled graphs persist between processes, and the key that identifies one.

On Trainium a compiled graph is a NEFF kept in the Neuron cache directory; here
the compiled artefacts are Inductor's (FX graph cache, generated C++ and the
shared objects built from it), so Inductor's cache directory is pointed at the
``compile`` directory of ``runtime/cache_dirs.py``. It must be set before any
compile *or* ``torch.compiler.load_cache_artifacts()``, hence at import. A graph is
accounted against the NEFF cache under its graph key (:func:`graph_key`), as on Trainium.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Sequence

import torch

from ..runtime import cache_dirs, settings
from ..runtime.log import get_logger

INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# Remembers the value we chose, so a child process that inherits it but was
# given another TORCH_NEURONX_NEFF_CACHE_DIR follows its own setting.
_CHOSEN_ENV = "TORCHNEURON_CHOSEN_INDUCTOR_CACHE_DIR"


_log = get_logger("compile_cache")
# Why the configured compile cache cannot be used (then graphs compile into a
# directory removed at exit, as eager kernels count without the NEFF cache).
_unusable: str | None = None
_warned = False


def install() -> None:
    """Point Inductor's caches at ours unless the user chose a directory for them."""
    global _unusable
    current = settings.get_str(INDUCTOR_CACHE_ENV)
    if current is None or current == settings.get_str(_CHOSEN_ENV):
        chosen = os.path.abspath(cache_dirs.compile_dir())
        _unusable = _why_unusable(Path(chosen))
        if _unusable is not None:
            chosen = tempfile.mkdtemp(prefix="torchneuron-compile-")
            atexit.register(shutil.rmtree, chosen, ignore_errors=True)
        os.environ[INDUCTOR_CACHE_ENV] = os.environ[_CHOSEN_ENV] = chosen


def _why_unusable(directory: Path) -> str | None:
    """Why ``directory`` cannot be created or written, checked without creating it."""
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def persistent() -> bool:
    """Do compiled graphs persist between processes? Warns once when the
    configured cache directory is unusable (the job goes on without it)."""
    global _warned
    if _unusable is not None and not _warned:
        _warned = True
        _log.warning("compile cache %s is not usable (%s); compiled graphs are not kept between runs",
                     cache_dirs.compile_dir(), _unusable)
    return cache_dirs.persistent_cache_enabled() and _unusable is None


# Graph keys "loaded" in this process, per persistent cache: the real product's in-memory cache
# in front of the disk. ``torch_neuronx.use_neff_cache`` starts a new cache object, so accounting
# then starts afresh, as for eager kernels.
_loaded_graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_loaded_without_cache: set[str] = set()


def claim_graph(key: str, record: dict) -> str:
    """Account one compiled graph against the caches eager kernels use, as on Trainium
    (TR ``neuron_dynamo_backend/compile.py:97-113`` keys it into the eager NEFF caches).

    Returns ``"memory hit"`` (already loaded in this process), ``"disk hit"``
    (in the persistent NEFF cache) or ``"compiled"`` (neuronx-cc would run).
    """
    from .. import accounting
    from ..accounting.neff_cache import Outcome

    neff_cache = accounting.active_neff_cache()
    loaded = _loaded_without_cache if neff_cache is None else _loaded_graphs.setdefault(neff_cache, set())
    if key in loaded:
        return "memory hit"
    loaded.add(key)
    if neff_cache is not None and neff_cache.claim(key, record) is Outcome.HIT:
        return "disk hit"
    return "compiled"


def _describe(values: Sequence[Any]) -> list[str]:
    return [
        f"{tuple(v.shape)}:{v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__ for v in values
    ]


def graph_key(text: str, inputs: Sequence[Any], outputs: Sequence[Any], compiler: dict) -> str:
    """sha256 of the StableHLO text, the I/O shapes and dtypes and the compiler configuration.

    The real product's graph key (``stablehlo_utils.py:14-56``, ``compile.py:97-113``)
    with its compiler suffix (target, LNC, ``-O2``, ``NEURON_CC_FLAGS``).
    """
    digest = hashlib.sha256(text.encode())
    digest.update(json.dumps({"in": _describe(inputs), "out": _describe(outputs),
                              "compiler": compiler}, sort_keys=True).encode())
    return digest.hexdigest()
