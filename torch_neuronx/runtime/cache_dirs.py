"""Where the persistent caches live, and whether they are used at all.

One root for both: the eager per-signature NEFF cache (fidelity) and the
compiled-graph cache (compile). ``TORCH_NEURONX_NEFF_CACHE_DIR`` names the NEFF
cache and compiled graphs go to ``compile/`` inside it; by default both sit in
the user cache directory, as ``torchneuron/neff`` and ``torchneuron/compile``.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import settings


def _user_root() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("torchneuron"))


def neff_dir() -> Path:
    given = settings.get_str("TORCH_NEURONX_NEFF_CACHE_DIR")
    return Path(given) if given is not None else _user_root() / "neff"


def compile_dir(neff_root: str | os.PathLike | None = None) -> Path:
    """``compile/`` in the NEFF cache ``neff_root``, by default this process's (the variable, read
    now): a caller configuring a child process with another root (a test job queued with its own
    environment) asks where that child compiles, and gets the one mapping the library uses."""
    if neff_root is None:
        given = settings.get_str("TORCH_NEURONX_NEFF_CACHE_DIR")
        neff_root = given if given is not None else _user_root()
    return Path(neff_root) / "compile"


def persistent_cache_enabled() -> bool:
    """``TORCH_NEURONX_NEFF_DISABLE_CACHE`` (or its alias) turns off both caches."""
    return not settings.get_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE")
