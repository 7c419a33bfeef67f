"""Which FP8 formats the selected instance's NeuronCores take, and the message otherwise.

- NeuronCore-v2 (Trn1) and -v3 (Trn2): cFP8, i.e. FP8 e5m2 and the chip's own
  IEEE-style e4m3 (Neuron docs, "Data Types", NeuronCore v2). PyTorch has no
  dtype for that e4m3; its OCP ``float8_e4m3fn`` is refused by the compiler with
  ``[NCC_EVRF051] Data type F8E4M3FN is not supported on TRN1/TRN2. Target TRN3
  or later hardware`` (compiler error-code page NCC_EVRF051;
  https://github.com/aws-neuron/aws-neuron-sdk/issues/1393), even as storage, unless
  ``--experimental-unsafe-fp8e4m3fn-as-fp8e4m3`` converts it to the chip's e4m3.
- NeuronCore-v4 (Trn3): OCP ``float8_e4m3fn`` and ``float8_e5m2``, and MX
  block scaling (MXFP8; Neuron 2.34's TorchAO Neuron runs ``MXFP8Linear``
  through ``aten::_scaled_mm`` on Trn3 only).
- No NeuronCore takes the "fnuz" formats (AMD's).

A refused format fails the first kernel that reads or writes it (casts on the
device included), as a compile error of that kernel; host-device copies move
its bytes, as DMA does.
"""
from __future__ import annotations

import torch

from ..runtime.extension import _C
from ..runtime.profiles import InstanceProfile
from .compiler_flags import FP8E4M3FN_AS_FP8E4M3, PrecisionFlags

CORE = {"trn1": "NeuronCore-v2", "trn2": "NeuronCore-v3", "trn3": "NeuronCore-v4"}
_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
_EVRF051 = "[NCC_EVRF051] Data type F8E4M3FN is not supported on TRN1/TRN2. Target TRN3 or later hardware"


def supported(target: str, flags: PrecisionFlags) -> tuple[torch.dtype, ...]:
    """The FP8 dtypes kernels on ``target`` take."""
    if target == "trn3" or flags.fp8e4m3fn_as_fp8e4m3:
        return (torch.float8_e4m3fn, torch.float8_e5m2)
    return (torch.float8_e5m2,)


def mx_supported(target: str) -> bool:
    return target == "trn3"


def _refusal(dtype: torch.dtype, profile: InstanceProfile) -> str:
    core = CORE.get(profile.family, profile.family)
    if dtype == torch.float8_e4m3fn:
        return (f'error message="COMPILATION FAILED: {_EVRF051}" (emulated {profile.name}, {core}: it takes '
                f"float8_e5m2; float8_e4m3fn needs TORCHNEURON_INSTANCE=trn3, or {FP8E4M3FN_AS_FP8E4M3} in "
                "NEURON_CC_FLAGS)")
    name = str(dtype).removeprefix("torch.")
    return (f"{name} is not a format any NeuronCore takes (the fnuz FP8 formats are AMD's); use "
            f"{' or '.join(str(d).removeprefix('torch.') for d in supported(profile.family, PrecisionFlags()))} "
            f"on {profile.name}")


def apply(profile: InstanceProfile, flags: PrecisionFlags) -> None:
    """Tell the C++ core which formats ``profile`` refuses, and whether it runs MX matmuls."""
    allowed = supported(profile.family, flags)
    refused = [d for d in (torch.float8_e4m3fn, torch.float8_e5m2, *_FNUZ) if d not in allowed]
    _C._set_refused_dtypes([(d, _refusal(d, profile)) for d in refused])
    _C._set_mx_support(mx_supported(profile.family), (
        f"MX block-scaled FP8 matmuls run on NeuronCore-v4 (trn3) only; the emulated {profile.name} has "
        f"{CORE.get(profile.family, profile.family)} (set TORCHNEURON_INSTANCE=trn3, or use tensor-wise or "
        "row-wise scales)"))
