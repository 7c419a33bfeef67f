"""The projected device timeline: where each noted unit of work runs on the device.

The device runs asynchronously from the host: the host issues a kernel, a
compiled graph or a collective and goes on; the device starts it when it is
free, not when it was issued. So each unit starts at ``max(issued, device
free)`` and lasts its projected seconds (``projection/``: an eager kernel's
launch plus roofline time, a graph's launch plus ``GraphCost.seconds``, a
collective's ring or tree time), and the durations of the units add up to the
projection's step time (``StepProjection.seconds``). Collectives run on their
own queue, as ``projection/trace.py`` places them: one starts when the compute
issued before it has finished and the previous collective is done, and does
not hold back the compute after it.

Besides the one event per unit (the ``queue`` track, counted as device time),
``DEVICE`` mode adds each engine's busy span inside it and ``RUNTIME`` mode the
host side of each launch, which the trace links to the device event with a
flow arrow. Every figure here is a projection (``"label": "projected"``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ..accounting.device_work import COLLECTIVE, GRAPH, issued_work
from ..projection import ProjectionError, collective_seconds
from ..projection.hardware import ENGINES
from .config import ProfileMode

KERNEL = 0  # DeviceWork::kKernel
QUEUE = "NeuronCore (projected)"
COLLECTIVES = "collectives (projected)"
ENGINE_TRACKS = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimd", "dma": "DMA"}
TRACKS = (QUEUE, *ENGINE_TRACKS.values(), COLLECTIVES)  # resource ids 1.. in this order
LAUNCH = "neuron_launch"  # the host side of a launch (RUNTIME mode)
LABEL = "projected"


@dataclasses.dataclass(frozen=True)
class Note:
    """One unit of work as the host noted it (``csrc/profiler/DeviceTrace.cpp``)."""

    kind: int  # 0 kernel, 1 graph, 2 collective
    device: int
    payload: int  # kernel: signature key; graph, collective: ``accounting.device_work`` id
    correlation: int  # the profiler's id of the innermost CPU op that issued it (0: none)
    issued_ns: int
    thread: int

    @property
    def key(self) -> str:
        return f"{self.payload:016x}"


@dataclasses.dataclass(frozen=True)
class DeviceEvent:
    """One event of the trace. ``kind``: ``"device"`` (a kernel, graph or collective: device
    time, linked to its CPU op), ``"engine"`` (an engine's busy span inside one) or
    ``"launch"`` (the host issuing one)."""

    kind: str
    name: str
    track: str  # a TRACKS name, or "host" for a launch
    device: int
    start_ns: float  # from the timeline's origin: a float of Unix ns would round to 256 ns
    end_ns: float
    correlation: int = 0
    flow: int = 0
    thread: int = 0
    args: dict = dataclasses.field(default_factory=dict)  # its figures; every event is labelled LABEL

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclasses.dataclass
class Timeline:
    """The events placed (times in ns from ``origin_ns``, Unix ns), and what could not be
    placed (a signature or graph the projection never saw, a collective over a link without a
    bandwidth), by kind."""

    events: list[DeviceEvent]
    placed: dict[str, int]
    unprojected: dict[str, int]
    origin_ns: int = 0

    def device_events(self) -> list[DeviceEvent]:
        return [e for e in self.events if e.kind == "device"]

    def device_seconds(self) -> float:
        return sum(e.seconds for e in self.device_events())


@dataclasses.dataclass
class _Core:
    """One core's queues: when its compute and its collectives are next free (ns)."""

    free: float = 0.0
    comm_free: float = 0.0


class _Placer:
    def __init__(self, projector, modes: Iterable[ProfileMode]) -> None:
        self.projector = projector
        self.engines = ProfileMode.DEVICE in modes
        self.launches = ProfileMode.RUNTIME in modes
        self.cores: dict[int, _Core] = {}
        self.timeline = Timeline([], dict.fromkeys(("kernel", "graph", "collective"), 0),
                                 dict.fromkeys(("kernel", "graph", "collective"), 0))

    def place(self, note: Note) -> None:
        core = self.cores.setdefault(note.device, _Core())
        if note.kind == KERNEL:
            self._kernel(note, core)
        elif note.kind == GRAPH:
            self._graph(note, core)
        elif note.kind == COLLECTIVE:
            self._collective(note, core)

    def _emit(self, note: Note, what: str, name: str, track: str, start: float, seconds: float,
              args: dict) -> float:
        """The device event of one unit (and its launch); returns its end (ns)."""
        end = start + seconds * 1e9
        flow = sum(self.timeline.placed.values()) + 1
        self.timeline.placed[what] += 1
        self.timeline.events.append(DeviceEvent(
            "device", f"{name} ({LABEL})", track, note.device, start, end, note.correlation, flow,
            args={"queued_us": (start - note.issued_ns) / 1e3, **args}))
        if self.launches:
            self.timeline.events.append(DeviceEvent(
                "launch", LAUNCH, "host", note.device, note.issued_ns, note.issued_ns, note.correlation, flow,
                note.thread, {"work": name}))
        return end

    def _busy(self, note: Note, engine: str, start: float, seconds: float, op: str) -> None:
        if self.engines and seconds > 0:
            self.timeline.events.append(DeviceEvent(
                "engine", ENGINE_TRACKS[engine], ENGINE_TRACKS[engine], note.device, start,
                start + seconds * 1e9, args={"work": op}))

    def _kernel(self, note: Note, core: _Core) -> None:
        cost = self.projector.kernels.get(note.key)
        if cost is None:
            self.timeline.unprojected["kernel"] += 1
            return
        if cost.engine == "none":  # a view or an allocation: no kernel is launched
            return
        launch = self.projector.launch_seconds(cost)
        start = max(float(note.issued_ns), core.free)
        core.free = self._emit(note, "kernel", cost.op, QUEUE, start, launch + cost.seconds, {
            "engine": ENGINE_TRACKS[cost.engine], "bound": cost.bound, "flops": cost.flops, "bytes": cost.bytes,
            "launch_us": launch * 1e6, "kernel_us": cost.seconds * 1e6, "signature": note.key})
        self._busy(note, cost.engine, start + launch * 1e9, cost.seconds, cost.op)

    def _graph(self, note: Note, core: _Core) -> None:
        name = issued_work(note.payload)
        graph = self.projector.graphs.get(name)
        if graph is None:
            self.timeline.unprojected["graph"] += 1
            return
        launch = self.projector.calibration.launch_seconds["graph"]
        start = max(float(note.issued_ns), core.free)
        core.free = self._emit(note, "graph", f"graph {name}", QUEUE, start, launch + graph.seconds, {
            "graph": name, "nodes": graph.nodes, "bound": graph.bound, "flops": graph.flops,
            "bytes": graph.bytes, "launch_us": launch * 1e6, "graph_us": graph.seconds * 1e6})
        # the compiler's schedule: engines side by side (graph_engine_overlap), else one after another;
        # a graph's HBM traffic is the DMA queues' work
        begin = at = start + launch * 1e9
        for engine in ENGINES:
            if engine == "dma":
                self._busy(note, engine, begin, max(graph.engine_seconds.get(engine, 0.0), graph.memory_seconds),
                           f"graph {name}")
                continue
            self._busy(note, engine, at, graph.engine_seconds.get(engine, 0.0), f"graph {name}")
            if not self.projector.calibration.graph_engine_overlap:
                at += graph.engine_seconds.get(engine, 0.0) * 1e9

    def _collective(self, note: Note, core: _Core) -> None:
        record = issued_work(note.payload)
        try:
            seconds = collective_seconds(record, self.projector.device, self.projector.calibration)
        except ProjectionError:
            self.timeline.unprojected["collective"] += 1
            return
        start = max(float(note.issued_ns), core.free, core.comm_free)
        core.comm_free = self._emit(note, "collective", record.kind, COLLECTIVES, start, seconds, {
            "bytes": record.nbytes, "group_size": record.group_size, "link": record.link})


def place(notes: Iterable[Note], projector, modes: Iterable[ProfileMode]) -> Timeline:
    """The timeline of ``notes`` (any order; placed in issue order) under ``projector``."""
    placer = _Placer(projector, tuple(modes))
    notes = sorted(notes, key=lambda n: n.issued_ns)
    origin = notes[0].issued_ns if notes else 0
    for note in notes:
        placer.place(dataclasses.replace(note, issued_ns=note.issued_ns - origin))
    placer.timeline.origin_ns = origin
    return placer.timeline
