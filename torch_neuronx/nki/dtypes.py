"""NKI data types as NumPy/ml_dtypes dtypes, and the precise-fp switch.

``NKI_PRECISE_FP=1`` (default, as in the official simulator) stores bf16/fp8
tiles in their own format through ml_dtypes, so every write rounds as the
hardware does; ``NKI_PRECISE_FP=0`` stores every float tile in fp32 to tell
precision loss from logic errors. Engines always compute in fp32.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ..runtime.settings import get_flag

bool_ = np.dtype(np.bool_)
int8, int16, int32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
uint8, uint16, uint32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
float16, float32 = np.dtype(np.float16), np.dtype(np.float32)
tfloat32 = float32  # TensorE rounds tf32 inputs; stored as fp32 here
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)

NAMES = ("bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32",
         "tfloat32", "bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")

_TORCH_TO_NUMPY = {
    torch.bool: bool_, torch.int8: int8, torch.int16: int16, torch.int32: int32, torch.uint8: uint8,
    torch.float16: float16, torch.float32: float32, torch.bfloat16: bfloat16,
    torch.float8_e4m3fn: float8_e4m3fn, torch.float8_e5m2: float8_e5m2,
}
_NUMPY_TO_TORCH = {v: k for k, v in _TORCH_TO_NUMPY.items()}
# torch has no NumPy twin for these; tensors cross as same-width integers, bit for bit.
_BIT_TWINS = {bfloat16: torch.int16, float8_e4m3fn: torch.int8, float8_e5m2: torch.int8}


def as_dtype(dtype) -> np.dtype:
    """Accept NKI/NumPy dtypes, their names, or torch dtypes."""
    if isinstance(dtype, torch.dtype):
        try:
            return _TORCH_TO_NUMPY[dtype]
        except KeyError:
            raise TypeError(f"{dtype} has no NKI data type; NKI tiles hold 8-32-bit numbers") from None
    if isinstance(dtype, str) and dtype in NAMES:
        return globals()[dtype]
    return np.dtype(dtype)


def to_torch_dtype(dtype: np.dtype) -> torch.dtype:
    return _NUMPY_TO_TORCH[as_dtype(dtype)]


def is_float(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or dtype in (bfloat16, float8_e4m3, float8_e4m3fn,
                                                          float8_e5m2, float8_e8m0fnu)


def precise_fp() -> bool:
    return get_flag("NKI_PRECISE_FP")


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a tile of ``dtype`` is held in under the current precise-fp setting."""
    return dtype if precise_fp() or not is_float(dtype) else float32


def sentinel(dtype: np.dtype):
    """What a new allocation holds: NaN for floats, the largest value for integers."""
    if is_float(dtype):
        return np.nan
    return np.iinfo(dtype).max if dtype != bool_ else True


def tensor_as_array(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's bytes, with the NKI dtype (no copy)."""
    dtype = as_dtype(t.dtype)
    twin = _BIT_TWINS.get(dtype)
    if twin is None:
        return t.detach().numpy()
    return t.detach().view(twin).numpy().view(dtype)


def empty_tensor(shape: tuple[int, ...], dtype: np.dtype) -> tuple[torch.Tensor, np.ndarray]:
    """A new CPU tensor and its NumPy view: kernel outputs live in torch-owned memory."""
    t = torch.empty(shape, dtype=to_torch_dtype(dtype))
    return t, tensor_as_array(t)
