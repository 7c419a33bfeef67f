"""64-bit value semantics of the device (int64 as int32, float64 as float32).

The narrowing itself runs in C++ on every value that lands in device memory
(``csrc/fidelity/Narrowing.cpp``); this module only selects the mode.
"""
from __future__ import annotations

import contextlib

import torch

from .. import _C
from ..runtime.config import env_choice

MODES = ("off", "narrow", "strict")


def mode_from_env() -> str:
    return env_choice("TORCHNEURON_64BIT", MODES, "narrow")


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


def install_print_hook() -> None:
    """Format neuron tensors with narrowing suspended.

    ``print(t)`` computes ratios of the values in float64 on the tensor's own
    device (``torch._tensor_str``). Narrowing those temporaries would raise the
    one-time "a 64-bit value changed" warning for a tensor that has no 64-bit
    value at all, and change nothing the user sees.
    """
    original = torch._tensor_str._tensor_str

    def _tensor_str(self, indent):
        if self.device.type != "neuron":
            return original(self, indent)
        with narrowing_suspended():
            return original(self, indent)

    torch._tensor_str._tensor_str = _tensor_str
