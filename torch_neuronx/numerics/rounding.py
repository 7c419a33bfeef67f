"""Stochastic rounding: the Neuron runtime's ``NEURON_RT_STOCHASTIC_ROUNDING_EN``.

"When ``NEURON_RT_STOCHASTIC_ROUNDING_EN=1``, [the framework] will use stochastic
rounding instead of round-nearest-even for all internal rounding operations when
casting from FP32 to a reduced precision data type (FP16, BF16, FP8, TF32)";
``NEURON_RT_STOCHASTIC_ROUNDING_SEED`` seeds the generator, 0 when unset (Neuron
docs, PyTorch/JAX environment variables; the runtime holds the seed as a 32-bit
unsigned integer). Off by default, in the runtime and here. The rounding runs in
C++ (``csrc/numerics/Rounding.cpp``) wherever the device writes a narrow value.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from ..runtime import settings
from ..runtime.errors import ConfigError
from ..runtime.extension import _C

ENABLE, SEED = "NEURON_RT_STOCHASTIC_ROUNDING_EN", "NEURON_RT_STOCHASTIC_ROUNDING_SEED"
MAX_SEED = 2**32 - 1


def _checked_seed(seed: int, where: str) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{where}={seed!r} is not an integer in [0, {MAX_SEED}]")
    return seed


def from_env() -> tuple[bool, int]:
    """(enabled, seed) from the runtime's variables; a bad value raises ``ConfigError`` naming it."""
    return settings.get_flag(ENABLE), _checked_seed(settings.get_int(SEED), SEED)


def apply(enabled: bool, seed: int) -> None:
    _C._set_stochastic_rounding(bool(enabled), _checked_seed(seed, "seed"))


def state() -> tuple[bool, int]:
    """(enabled, seed) in force."""
    enabled, seed = _C._stochastic_rounding()
    return bool(enabled), int(seed)


@contextlib.contextmanager
def stochastic_rounding(enabled: bool = True, seed: int = 0) -> Iterator[None]:
    """Stochastic rounding on (or off) inside the block, the generator started from ``seed``;
    what was in force before is restored after (its generator restarts from its seed)."""
    before = state()
    apply(enabled, seed)
    try:
        yield
    finally:
        apply(*before)
