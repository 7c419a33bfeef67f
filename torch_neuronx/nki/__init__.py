"""The NKI (Neuron Kernel Interface) 0.x API, emulated on the host.

``import nki`` resolves here when the real ``nki`` package is not installed
(see :mod:`torch_neuronx.nki.finder` and ``docs/nki.md``). Kernels run on NumPy
with ml_dtypes, are checked against the target's limits (partitions, SBUF and
PSUM capacity, matmul operand sizes and buffers), and leave an estimated time
in ``kernel.last_estimate``.

The submodules load on first use: ``import torch`` installs the import alias
from here and should not pay for the emulator itself.
"""
from __future__ import annotations

import importlib

from .errors import NkiValidationError, NotEmulatedError  # noqa: F401

EMULATED = True  # the real package has no such attribute: `getattr(nki, "EMULATED", False)`

_LAZY = {
    "isa": ("isa", None), "language": ("language", None), "hardware": ("hardware", None),
    "Kernel": ("jit", "Kernel"), "jit": ("jit", "jit"), "simulate": ("jit", "simulate"),
    "simulate_kernel": ("jit", "simulate_kernel"), "estimates": ("jit", "estimates"),
    "Estimate": ("cost", "Estimate"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(f"{__name__}.{module_name}")
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
