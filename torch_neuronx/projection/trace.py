"""A projected timeline as a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev).

One process, "projected NeuronCore", with one track per engine, one for
eager launch overhead and one for collectives. Eager kernels and graphs run
one after another (eager is serial; a graph's engines start together);
a collective starts when the compute before it has finished and does not
block the compute after it (asynchronous, as FSDP and DDP issue them).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..runtime.staged_files import write_text_whole
from .collectives import CollectiveRecord, collective_seconds
from .hardware import ENGINES
from .kernel import ProjectionError

TRACKS = ENGINES + ("launch", "collectives")
_US = 1e6


def _event(name: str, track: str, start: float, seconds: float, args: dict) -> dict:
    return {"name": name, "ph": "X", "pid": 1, "tid": TRACKS.index(track) + 1, "ts": start * _US,
            "dur": seconds * _US, "args": {"label": "projected", **args}}


def chrome_trace(projector, sequence: Iterable) -> dict:
    """The trace of ``sequence``, in execution order: signature keys (eager kernels),
    ``("graph", name)`` pairs and ``CollectiveRecord``s."""
    events = [{"name": "process_name", "ph": "M", "pid": 1,
               "args": {"name": f"projected NeuronCore ({projector.device.instance}, "
                                f"LNC={projector.device.lnc})"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": i + 1, "args": {"name": t}}
               for i, t in enumerate(TRACKS)]
    clock = comm_clock = 0.0
    for item in sequence:
        if isinstance(item, CollectiveRecord):
            start = max(clock, comm_clock)
            s = collective_seconds(item, projector.device, projector.calibration)
            events.append(_event(item.kind, "collectives", start, s,
                                 {"bytes": item.nbytes, "group_size": item.group_size, "link": item.link}))
            comm_clock = start + s
        elif isinstance(item, tuple) and len(item) == 2 and item[0] == "graph":
            g = projector.graphs.get(item[1])
            if g is None:
                raise ProjectionError(f"graph {item[1]!r} was never added with add_graph")
            launch = projector.calibration.launch_seconds["graph"]
            events.append(_event(f"launch {g.name}", "launch", clock, launch, {}))
            clock += launch
            for engine, s in g.engine_seconds.items():
                events.append(_event(g.name, engine, clock, s, {"flops": g.flops, "nodes": g.nodes}))
            clock += g.seconds
        elif isinstance(item, str):
            k = projector.kernels.get(item)
            if k is None:
                raise ProjectionError(f"signature {item!r} was never added with add_signature")
            if k.engine == "none":
                continue
            launch = projector.launch_seconds(k)
            events.append(_event(f"launch {k.op}", "launch", clock, launch, {}))
            clock += launch
            events.append(_event(k.op, k.engine, clock, k.seconds,
                                 {"flops": k.flops, "bytes": k.bytes, "bound": k.bound}))
            clock += k.seconds
        else:
            raise ProjectionError(f"cannot place {item!r} on the timeline: expected a signature key, "
                                  "('graph', name) or a CollectiveRecord")
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"label": "projected", **{k: str(v) for k, v in projector.describe().items()}}}


def write_chrome_trace(projector, sequence: Iterable, path: os.PathLike | str) -> Path:
    path = Path(path)
    write_text_whole(path, json.dumps(chrome_trace(projector, sequence), allow_nan=False))
    return path
