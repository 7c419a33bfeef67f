"""Value semantics of the device: the 64-bit mode (int64 / float64 kept as 32-bit values, as
Trainium stores them), printing neuron tensors without spurious narrowing warnings, and the
chip's precision: stochastic rounding, the compiler's auto-cast and the FP8 formats of the
instance. See ``docs/fidelity.md``; the narrowing and rounding run in C++ (``csrc/numerics/``).

``install`` runs once from ``torch_neuronx._register`` and ``configure`` again from
``torch_neuronx.reconfigure``; ``get_64bit_mode`` and ``set_64bit_mode`` are re-exported as
``torch_neuronx.<name>``.
"""
from __future__ import annotations

from ..runtime.errors import ConfigError
from ..runtime.profiles import InstanceProfile
from . import precision, tensor_print
from .narrowing import get_64bit_mode, mode_from_env, set_64bit_mode
from .rounding import stochastic_rounding

__all__ = ["get_64bit_mode", "set_64bit_mode", "stochastic_rounding", "configure"]


def configure(profile: InstanceProfile | None = None) -> None:
    """Apply the precision settings of the environment (``NEURON_CC_FLAGS``, the
    stochastic-rounding variables) for ``profile``; raises ``ConfigError`` for a bad value."""
    precision.configure(profile)


def install(profile: InstanceProfile) -> ConfigError | None:
    """At import: a bad precision variable is returned, to be raised at the first device use."""
    set_64bit_mode(mode_from_env())
    tensor_print.install()
    try:
        configure(profile)
    except ConfigError as exc:
        return exc
    return None
