"""The chip's precision settings of this process, applied to the C++ core and described.

One place reads them (``NEURON_CC_FLAGS``, the stochastic-rounding variables, the
instance's FP8 formats) and pushes them to ``csrc/numerics/Precision.cpp``; the
compiled graphs read the same flags (``compile/precision_pass.py``), and
``torchneuron info`` and the pilot report show :func:`summary`.
"""
from __future__ import annotations

import dataclasses

from ..projection.kernel import set_auto_cast_class, tensor_engine_ops
from ..runtime.errors import ConfigError
from ..runtime.extension import _C
from ..runtime.profiles import InstanceProfile, get_profile
from . import compiler_flags, fp8, rounding

_AUTO_CAST_CODES = {"none": 0, "matmult": 1, "all": 2}
# TensorE's rate for each auto-cast type: bf16, fp16 and tf32 run at one rate (hardware.json "bf16").
_RATE_CLASS = {"bf16": "bf16", "fp16": "bf16", "tf32": "bf16", "fp8_e4m3": "fp8"}
_flags = compiler_flags.PrecisionFlags()
_profile: InstanceProfile | None = None


def flags() -> compiler_flags.PrecisionFlags:
    """The precision flags in force (``NEURON_CC_FLAGS`` as last configured)."""
    return _flags


def set_flags(new: compiler_flags.PrecisionFlags) -> None:
    """Apply precision flags to eager kernels (compiled graphs read :func:`flags` when they compile)."""
    global _flags
    _flags = new
    _C._set_auto_cast(_AUTO_CAST_CODES[new.auto_cast], compiler_flags.AUTO_CAST_TYPES.index(new.auto_cast_type))
    set_auto_cast_class(None if new.auto_cast == "none" else _RATE_CLASS[new.auto_cast_type])
    if _profile is not None:
        fp8.apply(_profile, new)


def configure(profile: InstanceProfile | None = None) -> None:
    """Read the variables again and apply them for ``profile`` (default: the last one configured,
    else ``TORCHNEURON_INSTANCE``'s). A bad value leaves the defaults for its part in force and
    raises ``ConfigError`` naming the variable."""
    global _profile
    _profile = profile or _profile or get_profile()
    _C._set_tensor_engine_ops(sorted(tensor_engine_ops()))
    error = None
    try:
        new = compiler_flags.from_env()
    except ConfigError as exc:
        new, error = compiler_flags.PrecisionFlags(), exc
    set_flags(new)
    try:
        rounding.apply(*rounding.from_env())
    except ConfigError as exc:
        rounding.apply(False, 0)
        error = error or exc
    if error is not None:
        raise error


def summary() -> dict:
    """What the device does to numbers now, for ``info`` and the pilot report."""
    enabled, seed = rounding.state()
    profile = _profile or get_profile()
    return {
        **dataclasses.asdict(_flags),
        "stochastic_rounding": enabled,
        "stochastic_rounding_seed": seed,
        "fp8_formats": [str(d).removeprefix("torch.") for d in fp8.supported(profile.family, _flags)],
        "mx_block_scaling": fp8.mx_supported(profile.family),
        "neuron_core": fp8.CORE.get(profile.family, profile.family),
        "instance_family": profile.family,
    }


def describe(s: dict | None = None) -> list[tuple[str, str]]:
    """A :func:`summary` (default: the one in force) as (label, value) rows, each value saying
    where it comes from."""
    s = s or summary()
    accumulation = "on" if s["mixed_precision_accumulation"] else "off (--disable-mixed-precision-accumulation)"
    return [
        ("auto-cast (NEURON_CC_FLAGS)", s["auto_cast"] if s["auto_cast"] == "none"
         else f"{s['auto_cast']} to {s['auto_cast_type']}"),
        ("mixed-precision accumulation", accumulation),
        ("stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN)",
         f"on, seed {s['stochastic_rounding_seed']}" if s["stochastic_rounding"] else "off (round to nearest even)"),
        (f"FP8 formats ({s['neuron_core']})", ", ".join(s["fp8_formats"])
         + ("; MX block scaling" if s["mx_block_scaling"] else "")),
    ]
