"""64-bit value semantics of the device (int64 as int32, float64 as float32).

The narrowing itself runs in C++ on every value that lands in device memory
(``csrc/numerics/Narrowing.cpp``); this module only selects the mode.
"""
from __future__ import annotations

import contextlib

from ..runtime.extension import _C
from ..runtime import settings

MODES = settings.setting("TORCHNEURON_64BIT").choices  # ("off", "narrow", "strict")


def mode_from_env() -> str:
    return settings.get_choice("TORCHNEURON_64BIT")


def set_64bit_mode(mode: str) -> None:
    """``off`` keeps 64-bit values, ``narrow`` wraps/rounds them as Trainium
    stores them (warning once), ``strict`` raises when a value would change."""
    if mode not in MODES:
        raise ValueError(f"64-bit mode must be one of {', '.join(MODES)}, not {mode!r}")
    _C._set_narrowing_mode(MODES.index(mode))


def get_64bit_mode() -> str:
    return MODES[_C._narrowing_mode()]


@contextlib.contextmanager
def narrowing_suspended():
    """No 64-bit narrowing on this thread inside the block (other threads keep it)."""
    _C._suspend_narrowing(True)
    try:
        yield
    finally:
        _C._suspend_narrowing(False)
