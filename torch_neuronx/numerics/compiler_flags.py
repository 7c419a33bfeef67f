"""The precision flags of ``NEURON_CC_FLAGS``, read as neuronx-cc reads them.

The real product compiles every eager kernel and every graph with
``--model-type transformer --auto-cast=none`` followed by ``NEURON_CC_FLAGS``
(TR ``torch_neuronx/csrc/core/KernelExecution.cpp:65-83, 151-169``), and when
flags compete "the option later in the command line will supercede previous
options" (neuronx-cc CLI reference, ``--auto-cast-type``). So a user's
``--auto-cast matmult`` applies to eager kernels and compiled graphs alike.
The compiler's own defaults since Neuron 2.27 (release notes, compiler,
2025-12-19): no auto-cast, mixed-precision accumulation on.
"""
from __future__ import annotations

import dataclasses
import shlex

from ..runtime import settings
from ..runtime.errors import ConfigError

VARIABLE = "NEURON_CC_FLAGS"
# neuronx-cc --auto-cast: `matmul` is the release notes' spelling of the CLI reference's `matmult`.
AUTO_CAST = {"none": "none", "matmult": "matmult", "matmul": "matmult", "all": "all"}
AUTO_CAST_TYPES = ("bf16", "fp16", "tf32", "fp8_e4m3")  # the order the C++ core numbers them
FP8E4M3FN_AS_FP8E4M3 = "--experimental-unsafe-fp8e4m3fn-as-fp8e4m3"


@dataclasses.dataclass(frozen=True)
class PrecisionFlags:
    """What the compiler does to FP32 operations and accumulations."""

    auto_cast: str = "none"  # none | matmult | all
    auto_cast_type: str = "bf16"
    mixed_precision_accumulation: bool = True
    fp8e4m3fn_as_fp8e4m3: bool = False  # accept float8_e4m3fn on NeuronCore-v2/v3


def _value(tokens: list[str], i: int, flag: str, allowed) -> tuple[str, int]:
    """The value of ``flag`` at ``tokens[i]`` (``--flag=v`` or ``--flag v``) and the next index."""
    token = tokens[i]
    if "=" in token:
        value, nxt = token.split("=", 1)[1], i + 1
    elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
        value, nxt = tokens[i + 1], i + 2
    else:
        raise ConfigError(f"{VARIABLE}: {flag} needs a value ({', '.join(allowed)})")
    if value not in allowed:
        raise ConfigError(f"{VARIABLE}: {flag} value {value!r} is not one of {', '.join(allowed)}")
    return value, nxt


def parse(text: str) -> PrecisionFlags:
    """The precision flags of a ``NEURON_CC_FLAGS`` value; other flags are the compiler's and
    change only the kernel signature. A malformed value raises ``ConfigError`` naming the variable."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{VARIABLE}={text!r} is not a valid list of compiler flags ({exc})") from None
    flags = PrecisionFlags()
    i = 0
    while i < len(tokens):
        name = tokens[i].split("=", 1)[0]
        if name == "--auto-cast":
            value, i = _value(tokens, i, name, tuple(AUTO_CAST))
            flags = dataclasses.replace(flags, auto_cast=AUTO_CAST[value])
            continue
        if name == "--auto-cast-type":
            value, i = _value(tokens, i, name, AUTO_CAST_TYPES)
            flags = dataclasses.replace(flags, auto_cast_type=value)
            continue
        if name in ("--enable-mixed-precision-accumulation", "--disable-mixed-precision-accumulation"):
            flags = dataclasses.replace(flags, mixed_precision_accumulation=name.startswith("--enable"))
        elif name == FP8E4M3FN_AS_FP8E4M3:
            flags = dataclasses.replace(flags, fp8e4m3fn_as_fp8e4m3=True)
        i += 1
    return flags


def from_env() -> PrecisionFlags:
    return parse(settings.get_str(VARIABLE) or "")
