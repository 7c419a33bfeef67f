"""Value semantics of the device: the 64-bit mode (int64 / float64 kept as 32-bit values, as
Trainium stores them) and printing neuron tensors without spurious narrowing warnings.
See ``docs/fidelity.md``; the narrowing itself runs in C++ (``csrc/numerics/``).

``install`` runs once from ``torch_neuronx._register``; ``get_64bit_mode`` and
``set_64bit_mode`` are re-exported as ``torch_neuronx.<name>``.
"""
from __future__ import annotations

from . import tensor_print
from .narrowing import get_64bit_mode, mode_from_env, set_64bit_mode

__all__ = ["get_64bit_mode", "set_64bit_mode"]


def install() -> None:
    set_64bit_mode(mode_from_env())
    tensor_print.install()
