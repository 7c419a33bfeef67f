"""The NKI (Neuron Kernel Interface) 0.x API, emulated on the host.

``import nki`` resolves here when the real ``nki`` package is not installed
(see :mod:`torch_neuronx.nki.finder` and ``docs/nki.md``). Kernels run on NumPy
with ml_dtypes, are checked against the target's limits (partitions, SBUF and
PSUM capacity, matmul operand sizes and buffers), and leave an estimated time
in ``kernel.last_estimate``.
"""
from __future__ import annotations

from . import isa, language  # noqa: F401
from .cost import Estimate  # noqa: F401
from .errors import NkiValidationError, NotEmulatedError  # noqa: F401
from .jit import Kernel, jit, simulate, simulate_kernel  # noqa: F401

EMULATED = True  # the real package has no such attribute: `getattr(nki, "EMULATED", False)`
