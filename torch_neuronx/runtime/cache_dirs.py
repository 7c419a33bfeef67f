"""Where the persistent caches live, and whether they are used at all.

One root for both: the eager per-signature NEFF cache (fidelity) and the
compiled-graph cache (compile). ``TORCH_NEURONX_NEFF_CACHE_DIR`` names the NEFF
cache and compiled graphs go to ``compile/`` inside it; by default both sit in
the user cache directory, as ``torchneuron/neff`` and ``torchneuron/compile``.
"""
from __future__ import annotations

from pathlib import Path

from . import settings


def _user_root() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("torchneuron"))


def neff_dir() -> Path:
    given = settings.get_str("TORCH_NEURONX_NEFF_CACHE_DIR")
    return Path(given) if given is not None else _user_root() / "neff"


def compile_dir() -> Path:
    given = settings.get_str("TORCH_NEURONX_NEFF_CACHE_DIR")
    return (Path(given) if given is not None else _user_root()) / "compile"


def persistent_cache_enabled() -> bool:
    """``TORCH_NEURONX_NEFF_DISABLE_CACHE`` (or its alias) turns off both caches."""
    return not settings.get_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE")
