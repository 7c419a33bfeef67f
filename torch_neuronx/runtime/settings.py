"""Every environment variable the project reads, declared once, with typed getters.

In the spirit of torch_xla's ``env_vars.h`` and Accelerate's
``parse_flag_from_env``: a variable is read only through this registry, so its
name, aliases, type, default and meaning live in one place, and
``docs/configuration.md`` is generated from it::

    python -m torch_neuronx.runtime.settings --markdown > docs/configuration.md

Names follow the real product where one exists (``NEURON_*``,
``TORCH_NEURONX_*``, origin ``product``); project-only switches are prefixed
``TORCHNEURON_`` (origin ``ours``). Variables owned by PyTorch, torchrun or
other libraries are declared too when the project reads or sets them.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from .errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
ORIGINS = {
    "product": "the real TorchNeuron / Neuron runtime's name",
    "ours": "this project only",
    "pytorch": "PyTorch's own",
    "torchrun": "set by torchrun",
    "external": "another library's, set or read by our tools",
}


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # flag | int | float | str | choice | list
    default: Any
    help: str
    origin: str
    read_by: str  # the module that reads it (shown in the docs)
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    default_text: str | None = None  # the docs' wording when the default is computed
    invalid: str | None = None  # a value refused where the variable is read (kinds str, list)

    @property
    def refused_value(self) -> str | None:
        """A value this variable refuses with a one-line ``ConfigError``, or None when every value
        is accepted (a path, a flag for another tool). The tests set it to check that every
        command names the variable."""
        if self.invalid is not None:
            return self.invalid
        return {"flag": "maybe", "int": "many", "float": "many", "choice": "maybe"}.get(self.kind)

    def raw(self) -> tuple[str, str] | None:
        """(name, value) of the first of the name and its aliases that is set."""
        for name in (self.name, *self.aliases):
            value = os.environ.get(name)
            if value is not None:
                return name, value
        return None

    def parse(self, name: str, raw: str) -> Any:
        text = raw.strip()
        if self.kind == "flag":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ConfigError(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off")
        if text == "":
            return None  # empty means unset for every non-flag kind
        if self.kind in ("int", "float"):
            try:
                value = int(text) if self.kind == "int" else float(text)
            except ValueError:
                value = None
            if value is None or value != value or (self.minimum is not None and value < self.minimum):
                what = "integer" if self.kind == "int" else "number"
                if self.minimum == 0:
                    what = f"a non-negative {what}"
                elif self.minimum is not None:
                    what = f"a {what} >= {self.minimum:g}"
                else:
                    what = f"an {what}" if self.kind == "int" else f"a {what}"
                raise ConfigError(f"{name}={raw!r} is not {what}")
            return value
        if self.kind == "choice":
            if text.lower() not in self.choices:
                raise ConfigError(f"{name}={text.lower()!r} is not one of {', '.join(self.choices)}")
            return text.lower()
        if self.kind == "list":
            return tuple(item.strip() for item in text.split(",") if item.strip())
        return text


_S = Setting
REGISTRY: dict[str, Setting] = {s.name: s for s in (
    # --- topology (runtime/profiles.py) -----------------------------------
    _S("TORCHNEURON_INSTANCE", "str", "trn2.3xlarge",
       "instance profile: `trn1.2xlarge`, `trn1.32xlarge`, `trn2.3xlarge`, `trn2.48xlarge`, `trn3` "
       "([device](device.md)); `torch_neuronx.reconfigure(instance=...)` switches it in a running process",
       "ours", "runtime/profiles.py", invalid="trn9.huge"),
    _S("NEURON_LOGICAL_NC_CONFIG", "int", None,
       "logical NeuronCore config; only 1 or 2, anything else is an error", "product",
       "runtime/profiles.py", default_text="profile's (2 on trn2/trn3, 1 on trn1)"),
    _S("NEURON_RT_VISIBLE_CORES", "str", None,
       "cores of this process, e.g. `0-3` or `0,2`; under torchrun set to `LOCAL_RANK` when unset",
       "product", "runtime/profiles.py", default_text="all", invalid="0-99"),
    _S("NEURON_RT_NUM_CORES", "int", 0, "number of cores of this process (`0`: all)", "product",
       "runtime/profiles.py", minimum=0),
    _S("LOCAL_RANK", "int", None,
       "one core per rank: device index = local rank ([distributed](distributed.md))", "torchrun",
       "runtime/profiles.py", default_text="set by torchrun"),
    _S("LOCAL_WORLD_SIZE", "int", None,
       "ranks on this node: `device_count()` = local world size", "torchrun", "runtime/profiles.py",
       default_text="set by torchrun"),
    _S("RANK", "str", None, "global rank, named in the fault report of a failed collective", "torchrun",
       "distributed/faults.py", default_text="set by torchrun"),
    # --- device (neuron/__init__.py -> C++ core) ---------------------------
    _S("TORCH_NEURONX_ENABLE_NKI_SDPA", "flag", True,
       "`scaled_dot_product_attention` runs as one fused flash kernel when the inputs allow it "
       "(CPU's rules, incl. `torch.nn.attention.sdpa_kernel`); `0`: always the math decomposition "
       "([device](device.md))", "product", "neuron/__init__.py → csrc/aten/native/Attention.cpp"),
    _S("TORCHNEURON_HOST_POOL_MB", "int", 1024,
       "most host memory (MiB) kept in the pool of freed large-tensor blocks for reuse; `0`: none kept, "
       "nor small blocks cached per thread "
       "([device](device.md#memory))", "ours", "neuron/__init__.py → csrc/runtime/HostPool.cpp", minimum=0),
    # --- caches (runtime/cache_dirs.py) ------------------------------------
    _S("TORCH_NEURONX_NEFF_CACHE_DIR", "str", None,
       "persistent per-shape kernel cache; compiled graphs go to `compile/` inside it, or beside the "
       "default one ([fidelity](fidelity.md), [compile](compile.md))", "product", "runtime/cache_dirs.py",
       default_text="`<user cache dir>/torchneuron/neff`"),
    _S("TORCH_NEURONX_NEFF_DISABLE_CACHE", "flag", False,
       "`1`: no persistent cache, neither for eager kernels nor for compiled graphs", "product",
       "runtime/cache_dirs.py", aliases=("TORCH_NEURONX_DISABLE_NEFF_CACHE",)),
    _S("TORCHINDUCTOR_CACHE_DIR", "str", None, "where Inductor keeps compiled graphs", "pytorch",
       "compile/cache.py", default_text="set to the compile cache directory unless given"),
    _S("TORCHNEURON_CHOSEN_INDUCTOR_CACHE_DIR", "str", None,
       "internal: the `TORCHINDUCTOR_CACHE_DIR` we chose, so a child process given another "
       "`TORCH_NEURONX_NEFF_CACHE_DIR` follows its own", "ours", "compile/cache.py",
       default_text="set by us"),
    # --- accounting and numerics ------------------------------------------
    _S("NEURON_CC_FLAGS", "str", "",
       "compiler flags, appended to the built-in `--model-type transformer --auto-cast=none` of eager kernels "
       "and compiled graphs; part of every kernel signature. Its precision flags are honoured: `--auto-cast "
       "none|matmult|all`, `--auto-cast-type bf16|fp16|tf32|fp8_e4m3`, `--enable-` / "
       "`--disable-mixed-precision-accumulation`, `--experimental-unsafe-fp8e4m3fn-as-fp8e4m3` "
       "([fidelity](fidelity.md#the-chips-numbers))", "product",
       "accounting/signatures.py, numerics/compiler_flags.py"),
    _S("NEURON_COMPILER_OPT_LEVEL", "str", "-O1", "compiler optimisation level; part of every kernel signature",
       "product", "accounting/signatures.py"),
    _S("TORCHNEURON_KERNEL_ACCOUNTING", "flag", True,
       "`0` turns per-signature accounting and op tracking off", "ours", "accounting/signatures.py"),
    _S("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", "float", None,
       "overrides the **projected** neuronx-cc start-up per compiled program (eager kernel or graph)", "ours",
       "projection/compile_time.py", minimum=0,
       default_text="`projection/hardware.json` `compile_time.seconds_per_program` (2.0)"),
    _S("TORCHNEURON_HOST_OPS", "list", None, "comma-separated ops reported as host (CPU) fallbacks", "ours",
       "accounting/host_ops.py", default_text="linalg decompositions"),
    _S("TORCHNEURON_64BIT", "choice", "narrow",
       "`narrow`: int64 wraps as int32, float64 has float32 precision (warn once); `strict`: raise; "
       "`off`: keep 64-bit values", "ours", "numerics/narrowing.py", choices=("off", "narrow", "strict")),
    _S("TORCHNEURON_RNG", "choice", "cpu",
       "`cpu`: random ops on neuron draw from the CPU default generator, as the real product's fall "
       "back to the CPU (DTensors' draw from the core's generator); `counter`: every op from the core's "
       "counter-based (seed, offset) generator ([device](device.md#random-numbers))", "ours",
       "neuron/random.py", choices=("cpu", "counter")),
    _S("NEURON_RT_STOCHASTIC_ROUNDING_EN", "flag", False,
       "`1`: every rounding of an FP32 value to bf16/fp16/fp8 on the device (casts, kernel results, "
       "optimizer updates) is stochastic instead of to-nearest-even ([fidelity](fidelity.md#the-chips-numbers))",
       "product", "numerics/rounding.py"),
    _S("NEURON_RT_STOCHASTIC_ROUNDING_SEED", "int", 0,
       "seed of the stochastic-rounding generator: the same seed and ops give the same values", "product",
       "numerics/rounding.py", minimum=0),
    _S("TORCH_NEURONX_METRICS_DIR", "str", None, "write `metrics-<pid>.json` / `.csv` at exit", "product",
       "accounting/__init__.py"),
    _S("TORCH_NEURONX_LOG_LEVEL", "choice", "1", "`0` error … `3` debug, or a logging level name", "product",
       "runtime/log.py", choices=("0", "1", "2", "3", "debug", "info", "warning", "error", "critical")),
    # --- compile -------------------------------------------------------------
    _S("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "flag", True,
       "`0`: a graph that fails to lower or compile runs eagerly instead of raising; the compile option "
       "`fallback_execution` overrides it ([compile](compile.md))", "product", "compile/backend.py",
       default_text="`1` (Neuron 2.33 docs; the April source had `0`)"),
    _S("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "flag", False,
       "`1`: a CPU tensor input to a compiled graph raises instead of being copied to the device",
       "product", "compile/backend.py"),
    _S("TORCHNEURON_LOWER_GRAPHS", "flag", True,
       "`0`: do not lower `torch.compile(backend=\"neuron\")` graphs to StableHLO with torch-mlir: no check "
       "that a graph would compile on Trainium, the graph key hashes the FX code, no StableHLO op counts "
       "or artifacts; records say `not checked (TORCHNEURON_LOWER_GRAPHS=0)` ([compile](compile.md))",
       "ours", "compile/backend.py"),
    _S("TORCH_NEURONX_COMPLEX_DECOMPOSE", "flag", True,
       "`0`: complex values of a compiled graph reach torch-mlir as they are (no lowering for complex "
       "arithmetic); `1` rewrites the graph lowered in real pairs, the graph run stays complex "
       "([compile](compile.md#complex-values))", "product", "compile/backend.py",
       default_text="`1` (Neuron 2.33 docs: on with PyTorch >= 2.13)"),
    _S("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "flag", False,
       "`1`: write each compiled graph's StableHLO to `TORCH_NEURONX_DEBUG_DIR`", "product",
       "compile/lowering/preserved.py"),
    _S("TORCH_NEURONX_DEBUG_DIR", "str", None,
       "where artifacts go: `stablehlo/proc_<rank>/<graph name>.stablehlo.mlir`", "product",
       "compile/lowering/preserved.py", default_text="`<tmp>/neuron_backend`"),
    _S("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", "str", None,
       "exactly `1`: an implemented op that fails on the device raises instead of falling back to CPU; "
       "the eager lowering report says \"would fail\" for ops that do not lower "
       "([compile](compile.md#eager-kernels))", "product", "compile/kernel_lowering.py",
       default_text="unset = `0` (release builds; DEV builds of the real product use `1`)"),
    _S("TORCHNEURON_LOWER_EAGER", "flag", False,
       "`1`: lower each new eager kernel signature to StableHLO and report ops that would fall back to "
       "CPU ([compile](compile.md#eager-kernels))", "ours", "compile/kernel_lowering.py"),
    # --- distributed -----------------------------------------------------------
    _S("TORCHNEURON_ALLOW_UNSUPPORTED_COLLECTIVES", "flag", False,
       "`1`: run collectives the real `neuron` process group refuses (unequal `all_to_all_single` "
       "splits, `barrier` on a subgroup smaller than the world) instead of raising its "
       "`NotImplementedError` ([distributed](distributed.md))", "ours", "distributed/process_group.py"),
    # --- projection ----------------------------------------------------------
    _S("TORCHNEURON_PROJECTION_CALIBRATION", "str", None,
       "a calibration JSON (efficiency factors, launch overheads, link latencies, per-op overrides) "
       "replacing the defaults of the **projected** device time "
       "([projection](projection.md#calibrating-from-one-measured-run)); read when the projection is "
       "first used (`metrics()`, `torchneuron info`, `plan`), never at `import torch`: a missing or "
       "corrupt file, or an out-of-range, NaN or infinite figure, is one line naming this variable", "ours",
       "projection/calibration.py", default_text="unset", invalid="no-such-calibration.json"),
    # --- profiling (docs/profiling.md) ------------------------------------------
    _S("NEURON_RT_INSPECT_ENABLE", "flag", False,
       "`1`: profile the whole process without code changes: `torch.profiler` with CPU and device "
       "activity from the backend's load to exit, the trace written as `NeuronProfiler` writes it "
       "([profiling](profiling.md#without-code-changes)); a folder that cannot be written is one warning "
       "and a run without profiling", "product", "profiling/capture.py"),
    _S("NEURON_RT_INSPECT_OUTPUT_DIR", "str", "./output",
       "where profiles go: `<dir>/<host>_pid_<pid>/<timestamp>/trace.json`; also `NeuronProfiler`'s "
       "default", "product", "profiling/export.py"),
    _S("NEURON_RT_INSPECT_SYSTEM_PROFILE", "flag", True,
       "with `NEURON_RT_INSPECT_ENABLE`: the host side of each launch, linked to its device event "
       "(`ProfileMode.RUNTIME`)", "product", "profiling/capture.py"),
    _S("NEURON_RT_INSPECT_DEVICE_PROFILE", "choice", "0",
       "with `NEURON_RT_INSPECT_ENABLE`: `1`, `model` or `session` add the engine tracks "
       "(`ProfileMode.DEVICE`); `0`: none", "product", "profiling/capture.py",
       choices=("0", "1", "model", "session")),
    _S("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "int", 1_000_000,
       "device events kept per NeuronCore in one profile, the oldest dropped first (`NeuronConfig`'s "
       "`max_events_per_nc` overrides it)", "product", "profiling/session.py", minimum=1),
    # --- NKI ---------------------------------------------------------------------
    _S("NEURON_PLATFORM_TARGET_OVERRIDE", "choice", None,
       "NKI kernel target: `trn1`/`trn2`/`trn3` (or `gen2`/`gen3`/`gen4`): limits and clocks of the "
       "capacity checks and time estimate ([nki](nki.md))", "product", "nki/hardware.py",
       choices=("trn1", "trn2", "trn3", "gen2", "gen3", "gen4"), default_text="the instance profile's family"),
    _S("NKI_PRECISE_FP", "flag", True,
       "`1`: NKI bf16/fp8 tiles are stored in their own format (every write rounds); `0`: float tiles "
       "are held in fp32 ([nki](nki.md))", "product", "nki/dtypes.py"),
    # --- read outside the package -----------------------------------------
    _S("TORCH_DEVICE_BACKEND_AUTOLOAD", "flag", True,
       "`0` stops `import torch` from loading the backend (then `import torch_neuronx`)", "pytorch",
       "PyTorch"),
    _S("TORCHNEURON_FULL_OPINFO", "flag", False, "run the whole OpInfo database, not the default subset",
       "ours", "tests/device/test_opinfo.py"),
    _S("TORCHNEURON_OPINFO_LOG", "str", None, "append one JSON line per OpInfo sample to this file", "ours",
       "tests/device/test_opinfo.py"),
    _S("TORCHNEURON_BENCH_XLA_VENV", "str", None, "virtualenv holding torch_xla for the `xla` benchmark rows",
       "ours", "benchmarks/xla_env.py", default_text="`.venv-xla` in the repository"),
    _S("PJRT_DEVICE", "str", None, "torch_xla's device; the `xla` benchmark rows set `CPU`", "external",
       "benchmarks/adapters.py"),
    _S("WORLD_SIZE", "int", 1, "ranks of the job, read by the distributed examples", "torchrun",
       "examples/diffusion_tp.py"),
)}


def setting(name: str) -> Setting:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in torch_neuronx/runtime/settings.py") from None


_DECLARED = object()  # "use the registry's default"
# Variables whose value was found unusable at import (``defer_bad_values``): read as unset from
# then on, so that ``import torch`` completes and the error is raised at the first device use.
_unusable: set[str] = set()


def refused_values() -> dict[str, ConfigError]:
    """Every declared variable that is set to a value its declaration refuses, with its error
    (in declaration order). Reads the environment as it is now."""
    refused = {}
    for spec in REGISTRY.values():
        found = spec.raw()
        if found is None:
            continue
        try:
            spec.parse(*found)
        except ConfigError as exc:
            refused[spec.name] = exc
    return refused


def defer_bad_values() -> ConfigError | None:
    """Parse every declared variable that is set; return the first ``ConfigError``.

    A bad value must not break ``import torch`` for every script, CPU-only ones
    included: the variables that fail are read as unset afterwards, and the
    caller raises the returned error where the device is first used.
    """
    refused = refused_values()
    _unusable.update(refused)
    return next(iter(refused.values()), None)


def _get(name: str, kind: str, default: Any) -> Any:
    spec = setting(name)
    if spec.kind != kind:
        raise TypeError(f"{name} is declared as {spec.kind!r}, not {kind!r}")
    found = None if name in _unusable else spec.raw()
    value = None if found is None else spec.parse(*found)
    if value is not None:
        return value
    return spec.default if default is _DECLARED else default


def get_flag(name: str, default: Any = _DECLARED) -> bool:
    return _get(name, "flag", default)


def get_int(name: str, default: Any = _DECLARED) -> int | None:
    return _get(name, "int", default)


def get_float(name: str, default: Any = _DECLARED) -> float | None:
    return _get(name, "float", default)


def get_str(name: str, default: Any = _DECLARED) -> str | None:
    return _get(name, "str", default)


def get_choice(name: str, default: Any = _DECLARED) -> str:
    return _get(name, "choice", default)


def get_list(name: str, default: Any = _DECLARED) -> tuple[str, ...] | None:
    return _get(name, "list", default)


def markdown() -> str:
    """``docs/configuration.md``: the registry as a table."""
    lines = [
        "# Configuration: environment variables",
        "",
        "<!-- Generated from torch_neuronx/runtime/settings.py by",
        "     `python -m torch_neuronx.runtime.settings --markdown > docs/configuration.md`;",
        "     tests/device/test_settings.py fails when this file and the registry disagree. -->",
        "",
        "Every variable the project reads is declared once, in `torch_neuronx/runtime/settings.py`, and",
        "read only through it. Names follow the real TorchNeuron product where one exists (`NEURON_*`,",
        "`TORCH_NEURONX_*`); project-only switches start with `TORCHNEURON_`. Origins: "
        + "; ".join(f"**{k}**: {v}" for k, v in ORIGINS.items()) + ".",
        "",
        "A bad value never breaks `import torch` (which loads the backend): the device is registered",
        "with the defaults and the `ConfigError` naming the variable is raised at the first use of the",
        "device, by `torch.neuron.topology()` and at `init_process_group`; `torchneuron` prints it as one",
        "line and exits with status 2.",
        "",
        "| variable | type | default | origin | read by | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in REGISTRY.values():
        name = f"`{s.name}`" + (f" (alias {', '.join(f'`{a}`' for a in s.aliases)})" if s.aliases else "")
        kind = s.kind if not s.choices else " / ".join(f"`{c}`" for c in s.choices)
        if s.minimum is not None:
            kind += f" ≥ {s.minimum:g}"
        if s.default_text is not None:
            default = s.default_text
        elif s.kind == "flag":
            default = f"`{int(s.default)}`"
        elif s.default is None:
            default = "unset"
        else:
            default = f"`{s.default!r}`" if s.default == "" else f"`{s.default}`"
        lines.append(f"| {name} | {kind} | {default} | {s.origin} | `{s.read_by}` | {s.help} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The environment variables of TorchNeuron-OSS.")
    parser.add_argument("--markdown", action="store_true", help="print docs/configuration.md")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(), end="")
    else:
        for s in REGISTRY.values():
            found = s.raw()
            print(f"{s.name}={found[1] if found else ''}  ({s.kind}, {s.origin})")


if __name__ == "__main__":
    main()
