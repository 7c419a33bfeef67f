"""``NeuronConfig`` and ``ProfileMode``: the real product's profile configuration.

As documented in "Capture PyTorch profiles with Neuron Explorer" (DOCS
``tools/neuron-explorer/how-to-profile-workload``, "PyTorch profiling"): a
``NeuronConfig`` is passed to ``torch.profiler.profile`` as its
``experimental_config``, next to ``ProfilerActivity.CPU`` and
``ProfilerActivity.PrivateUse1``. It is PyTorch's own ``_ExperimentalConfig``,
so PyTorch accepts it unchanged; the Neuron fields travel to the device's
activity profiler in its ``custom_profiler_config`` string (the channel PyTorch
keeps for custom backends), as JSON.

On the emulated device the modes choose what the projected device timeline
shows (docs/profiling.md): ``RUNTIME`` the host side of each launch, linked to
the device event by a flow arrow; ``DEVICE`` the busy spans of each engine.
``CPU_UTIL`` and ``HOST_MEMORY`` are the host's, which the CPU trace and
``profile_memory`` already show: they add nothing here, and say so once.
"""
from __future__ import annotations

import enum
import json
import os
import re
from pathlib import Path

from torch._C._profiler import _ExperimentalConfig

from ..runtime.errors import UsageError
from ..runtime.staged_files import unwritable_reason


class ProfileMode(enum.Enum):
    DEVICE = "device"  # the real product: NeuronCore instructions (.ntff); here: engine tracks
    RUNTIME = "runtime"  # the real product: the runtime's system trace; here: launches and flows
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


DEFAULT_MODES = (ProfileMode.DEVICE, ProfileMode.RUNTIME)
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def _mode(value) -> ProfileMode:
    if isinstance(value, ProfileMode):
        return value
    if isinstance(value, str):
        for mode in ProfileMode:
            if value.strip().lower() in (mode.value, mode.name.lower()):
                return mode
    raise UsageError(f"NeuronConfig: unknown profile mode {value!r}; the modes are "
                     + ", ".join(f"ProfileMode.{m.name}" for m in ProfileMode))


def parse_modes(modes) -> tuple[ProfileMode, ...]:
    """The modes of ``modes`` (``ProfileMode`` values or their names), in order, once each."""
    if modes is None:
        return DEFAULT_MODES
    if isinstance(modes, (str, ProfileMode)):
        modes = [modes]
    try:
        items = list(modes)
    except TypeError:
        raise UsageError(f"NeuronConfig: modes must be a list of ProfileMode values, not {modes!r}") from None
    return tuple(dict.fromkeys(_mode(m) for m in items))


def parse_cores(spec: str | None) -> tuple[int, ...] | None:
    """``"0,1,2-5"`` → (0, 1, 2, 3, 4, 5); ``None`` or ``""``: every core."""
    if spec is None or str(spec).strip() == "":
        return None
    cores: set[int] = set()
    for part in str(spec).split(","):
        match = _RANGE.match(part)
        if match is None or (match.group(2) is not None and int(match.group(2)) < int(match.group(1))):
            raise UsageError(f"NeuronConfig: capture_enabled_for_nc={spec!r} is not a comma-separated list "
                             "of NeuronCore indices or ranges, e.g. \"0,1,2-5\"")
        first = int(match.group(1))
        cores.update(range(first, int(match.group(2) or first) + 1))
    if max(cores) >= 64:
        raise UsageError(f"NeuronConfig: capture_enabled_for_nc={spec!r} names core {max(cores)}; "
                         "cores are numbered 0-63")
    return tuple(sorted(cores))


def check_output_dir(path, what: str) -> Path:
    """``path`` as a ``Path``, or a ``UsageError`` naming ``what`` if it cannot be written."""
    reason = unwritable_reason(path, is_dir=True)
    if reason is not None:
        raise UsageError(f"{what}={str(path)!r} {reason}")
    return Path(path)


class NeuronConfig(_ExperimentalConfig):
    """What the device's profiler collects (the real product's parameters, same names).

    ``modes``: ``ProfileMode`` values (default ``[DEVICE, RUNTIME]``);
    ``max_events_per_nc``: device notes kept per NeuronCore, the oldest dropped first
    (default: ``NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC``);
    ``capture_enabled_for_nc``: cores recorded, e.g. ``"0,1,2-5"`` (default: all);
    ``profile_output_dir``: where ``NeuronProfiler.export_trace`` writes (checked now);
    ``neff_cache_dir``: accepted for compatibility (the emulator writes no NEFF files);
    ``precache_node_info``: project the kernels met so far when the profile starts, so
    that stopping it has less to do. Other keywords go to ``_ExperimentalConfig``.
    """

    def __init__(self, modes=None, max_events_per_nc: int | None = None,
                 capture_enabled_for_nc: str | None = None, profile_output_dir=None,
                 neff_cache_dir=None, precache_node_info: bool = True, **experimental) -> None:
        self.modes = parse_modes(modes)
        if max_events_per_nc is not None and (isinstance(max_events_per_nc, bool)
                                              or not isinstance(max_events_per_nc, int) or max_events_per_nc < 1):
            raise UsageError(f"NeuronConfig: max_events_per_nc={max_events_per_nc!r} must be an integer >= 1")
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = capture_enabled_for_nc
        cores = parse_cores(capture_enabled_for_nc)
        self.profile_output_dir = (None if profile_output_dir is None
                                   else check_output_dir(profile_output_dir, "profile_output_dir"))
        self.neff_cache_dir = None if neff_cache_dir is None else Path(neff_cache_dir)
        self.precache_node_info = bool(precache_node_info)
        if "custom_profiler_config" in experimental:
            raise UsageError("NeuronConfig sets custom_profiler_config itself; pass the Neuron fields instead")
        super().__init__(custom_profiler_config=json.dumps({
            "neuron": 1, "modes": [m.value for m in self.modes], "max_events_per_nc": max_events_per_nc,
            "cores": cores, "precache_node_info": self.precache_node_info}), **experimental)

    def __repr__(self) -> str:
        return (f"NeuronConfig(modes=[{', '.join(f'ProfileMode.{m.name}' for m in self.modes)}], "
                f"max_events_per_nc={self.max_events_per_nc}, "
                f"capture_enabled_for_nc={self.capture_enabled_for_nc!r}, "
                f"profile_output_dir={None if self.profile_output_dir is None else os.fspath(self.profile_output_dir)!r})")


def session_options(custom_profiler_config: str) -> dict:
    """The options a profile's device session runs with, from the string ``NeuronConfig``
    put in ``custom_profiler_config`` (the defaults when the profile had none)."""
    options = {"modes": DEFAULT_MODES, "max_events_per_nc": None, "cores": None, "precache_node_info": True}
    if custom_profiler_config:
        try:
            given = json.loads(custom_profiler_config)
        except ValueError:
            given = None
        if isinstance(given, dict) and given.get("neuron") == 1:
            options.update({k: given[k] for k in ("max_events_per_nc", "cores", "precache_node_info")})
            options["modes"] = parse_modes(given["modes"])
    return options
