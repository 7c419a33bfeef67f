"""Where compiled graphs persist between processes.

On Trainium a compiled graph is a NEFF kept in the Neuron cache directory; here
the compiled artefacts are Inductor's (FX graph cache, generated C++ and the
shared objects built from it), so Inductor's cache directory is pointed at the
``compile`` directory of ``runtime/cache_dirs.py``. It must be set before any
compile *or* ``torch.compiler.load_cache_artifacts()``, hence at import.
"""
from __future__ import annotations

import os

from ..runtime import cache_dirs, settings

INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# Remembers the value we chose, so a child process that inherits it but was
# given another TORCH_NEURONX_NEFF_CACHE_DIR follows its own setting.
_CHOSEN_ENV = "TORCHNEURON_CHOSEN_INDUCTOR_CACHE_DIR"


def install() -> None:
    """Point Inductor's caches at ours unless the user chose a directory for them."""
    current = settings.get_str(INDUCTOR_CACHE_ENV)
    if current is None or current == settings.get_str(_CHOSEN_ENV):
        os.environ[INDUCTOR_CACHE_ENV] = os.environ[_CHOSEN_ENV] = os.path.abspath(cache_dirs.compile_dir())
