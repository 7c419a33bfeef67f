"""The device's roundings as graph operators, for compiled graphs (``compile/precision_pass.py``).
Results are contiguous, as their fake kernels say.

A compiled graph runs Inductor's CPU code, which rounds to nearest even. Where the
chip rounds differently the pass inserts these ops; each reads the stochastic
rounding switch when it runs, as the runtime applies it to every NEFF it executes.
Their CPU kernels are ``csrc/numerics/Rounding.cpp``'s; on ``neuron`` tensors (a
graph run eagerly after a failed compile) they reach the device's fallback.
"""
from __future__ import annotations

import torch

from ..runtime.extension import _C
from .rounding import state


@torch.library.custom_op("torchneuron::round_to_cast_type", mutates_args=(), device_types="cpu")
def round_to_cast_type(x: torch.Tensor, cast_type: int) -> torch.Tensor:
    """``x`` (float32) with the precision of the compiler's auto-cast type ``cast_type``
    (``compiler_flags.AUTO_CAST_TYPES`` index), still float32."""
    return _C._round_in_float(x, cast_type, state()[0])


@round_to_cast_type.register_fake
def _(x: torch.Tensor, cast_type: int) -> torch.Tensor:
    return x.new_empty(x.shape, dtype=torch.float32)


@torch.library.custom_op("torchneuron::cast_as_device", mutates_args=(), device_types="cpu")
def cast_as_device(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` cast to ``dtype`` as the device casts: stochastically when that is on."""
    if state()[0] and x.is_floating_point() and dtype in _NARROW and x.dtype != dtype:
        return _C._round_stochastically(x, dtype)
    return x.to(dtype, memory_format=torch.contiguous_format)


@cast_as_device.register_fake
def _(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.new_empty(x.shape, dtype=dtype)


_NARROW = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2,
           torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
