"""The Python half of the device's Kineto session (``csrc/profiler/DeviceTrace.cpp``).

C++ calls :func:`on_start` when a profile with device activity starts and
:func:`build` when it stops. Neither may raise into Kineto: a problem becomes
one warning and a trace without device events, never a failed run.

``on_start(custom_profiler_config)`` returns ``(notes kept per core, bit mask of
the cores recorded or None, device id, device name, label, [(track id, track
name)])``; ``build(notes, start_ns, end_ns)``
takes the notes as ``(kind, device, payload, correlation, issued_ns, thread)``
tuples and returns one tuple per event: ``(activity, name, pid, track id,
start_ns, end_ns, linked correlation, flow id, flow starts here, label, the
args as a JSON object)`` with activity 0 a device event (counted as device
time), 1 an engine's busy span, 2 a host launch; the trace shows the args under
``"projection"``.
"""
from __future__ import annotations

import contextlib
import json
import os
import warnings

from torch._C import _autograd as _C_autograd

from .. import projection
from ..accounting import projected
from ..runtime import settings
from ..runtime.extension import _C
from .config import ProfileMode, session_options
from .timeline import COLLECTIVES, LABEL, QUEUE, TRACKS, Note, Timeline, place

_ACTIVITY = {"device": 0, "engine": 1, "launch": 2}
_HOST_MODES = (ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY)
_state: dict = {"options": session_options(""), "last": None, "warned": set()}


@contextlib.contextmanager
def _unrecorded():
    """Projecting a signature runs its op on meta tensors: not the user's ops, so not in
    the user's CPU trace (RecordFunction off on this thread meanwhile)."""
    _C_autograd._enable_record_function(False)
    try:
        yield
    finally:
        _C_autograd._enable_record_function(True)


def _warn_once(key: str, text: str) -> None:
    if key not in _state["warned"]:
        _state["warned"].add(key)
        warnings.warn(text, RuntimeWarning, stacklevel=2)


def on_start(custom_profiler_config: str) -> tuple:
    try:
        options = session_options(custom_profiler_config)
    except Exception as exc:  # a config NeuronConfig did not write: the defaults, said once
        _warn_once("config", f"neuron profiler: custom_profiler_config is not a NeuronConfig's ({exc}); "
                             "recording with the default modes")
        options = session_options("")
    _state["options"] = options
    for mode in _HOST_MODES:
        if mode in options["modes"]:
            _warn_once(mode.name, f"neuron profiler: ProfileMode.{mode.name} adds nothing on the emulated device: "
                                  "the host is the CPU of this trace (use profile_memory=True for its memory)")
    if options["precache_node_info"]:
        with _unrecorded():
            projected.project_pending()
    limit = options["max_events_per_nc"] or settings.get_int("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC")
    cores = options["cores"]
    mask = None if cores is None else sum(1 << c for c in cores)
    device = _C._current_device()
    projector = projection.get_projector()
    name = f"neuron:{device} (projected {projector.device.instance}, LNC={projector.device.lnc})"
    shown = TRACKS if ProfileMode.DEVICE in options["modes"] else (QUEUE, COLLECTIVES)
    return limit, mask, device, name, "projected", [(TRACKS.index(t) + 1, t) for t in shown]


def _as_tuple(event, origin_ns: int) -> tuple:
    host = event.kind == "launch"
    return (_ACTIVITY[event.kind], event.name, os.getpid() if host else event.device,
            event.thread if host else TRACKS.index(event.track) + 1, origin_ns + round(event.start_ns),
            origin_ns + round(event.end_ns), event.correlation, event.flow, host, LABEL, json.dumps(event.args))


def build(records, start_ns: int, end_ns: int) -> list[tuple]:
    try:
        with _unrecorded():
            projected.project_pending()  # signatures first met while recording
        timeline = place((Note(*r) for r in records), projection.get_projector(), _state["options"]["modes"])
        _state["last"] = timeline
        for kind, n in timeline.unprojected.items():
            if n:
                _warn_once(f"unprojected-{kind}", f"neuron profiler: {n} {kind} run(s) have no projection "
                                                  "and no device event (see metrics()['projection'])")
        return [_as_tuple(e, timeline.origin_ns) for e in timeline.events]
    except Exception as exc:  # the trace loses its device events, the run goes on
        _warn_once("build", f"neuron profiler: no device events in this trace: {type(exc).__name__}: {exc}")
        return []


def last_timeline() -> Timeline | None:
    """The device timeline of the last profile that stopped (its events as placed)."""
    return _state["last"]


def install() -> None:
    _C._install_device_trace(on_start, build)
