"""Profiling without code changes: the real runtime's environment capture.

With ``NEURON_RT_INSPECT_ENABLE=1`` (DOCS ``tools/neuron-explorer/how-to-profile-workload``,
"Environment variable profiling") the whole process is profiled and its trace
written to ``NEURON_RT_INSPECT_OUTPUT_DIR`` at exit, as ``NeuronProfiler`` writes
it: a ``torch.profiler.profile`` with CPU and device activity starts when the
backend loads and stops at exit. ``NEURON_RT_INSPECT_SYSTEM_PROFILE`` (on by
default) maps to ``ProfileMode.RUNTIME``, ``NEURON_RT_INSPECT_DEVICE_PROFILE``
(off by default) to ``ProfileMode.DEVICE``. A folder that cannot be written, or
any other problem, is one warning and a run without profiling: the capture must
never cost the run.
"""
from __future__ import annotations

import atexit
import warnings

import torch

from ..runtime import settings
from ..runtime.errors import first_line
from .config import NeuronConfig, ProfileMode
from .export import NeuronProfiler

_active: dict = {}


def _modes() -> list[ProfileMode]:
    modes = []
    if settings.get_flag("NEURON_RT_INSPECT_SYSTEM_PROFILE"):
        modes.append(ProfileMode.RUNTIME)
    if settings.get_choice("NEURON_RT_INSPECT_DEVICE_PROFILE") != "0":
        modes.append(ProfileMode.DEVICE)
    return modes


def start_from_environment() -> bool:
    """Start the process-wide capture if ``NEURON_RT_INSPECT_ENABLE`` asks for it."""
    if not settings.get_flag("NEURON_RT_INSPECT_ENABLE") or _active:
        return False
    try:
        from torch.profiler import ProfilerActivity, profile

        config = NeuronConfig(modes=_modes(), profile_output_dir=settings.get_str("NEURON_RT_INSPECT_OUTPUT_DIR"))
        exporter = NeuronProfiler(config)
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=config)
        prof.start()
    except Exception as exc:  # noqa: BLE001  (the run goes on without profiling)
        warnings.warn(f"NEURON_RT_INSPECT_ENABLE=1: profiling is off for this run: {first_line(exc)}",
                      RuntimeWarning, stacklevel=2)
        return False
    _active.update(prof=prof, exporter=exporter)
    atexit.register(stop)
    return True


def stop():
    """Stop the capture and write its trace (at exit; callable earlier). Returns the path."""
    if not _active:
        return None
    prof, exporter = _active.pop("prof"), _active.pop("exporter")
    if not torch.autograd.profiler._is_profiler_enabled:
        # PyTorch runs one profiler at a time: a torch.profiler the program started and stopped
        # ended this one too, and exporting its empty result would crash
        warnings.warn("NEURON_RT_INSPECT_ENABLE=1: no trace written: a torch.profiler in the program ended "
                      "the capture (use one or the other)", RuntimeWarning, stacklevel=2)
        return None
    try:
        prof.stop()
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"NEURON_RT_INSPECT_ENABLE=1: the profile could not be stopped: {first_line(exc)}",
                      RuntimeWarning, stacklevel=2)
        return None
    return exporter.export_trace(prof)
