"""One core's device memory over time, drawn from a memory snapshot
(``torch.neuron.memory._snapshot()`` with the history recorded): allocated and reserved bytes
after each allocator event, for pages that must work offline (PyTorch's own viewer,
``torch.cuda._memory_viz``, loads its script from the network).

The snapshot's segments give the figures at its end; its events, replayed backwards, give every
earlier one, so a history that kept only its newest events still draws exactly."""
from __future__ import annotations

from typing import Any

from .figures import plt

# How each event changes (allocated, reserved) bytes.
_EFFECT = {"alloc": (1, 0), "free_completed": (-1, 0), "segment_alloc": (0, 1), "segment_free": (0, -1)}


def memory_series(snapshot: dict[str, Any], device: int) -> tuple[list[float], list[int], list[int]]:
    """(milliseconds since the first event, allocated bytes, reserved bytes) after each of the
    core's events, with its state before the first event at time 0."""
    segments = [s for s in snapshot["segments"] if s["device"] == device]
    allocated = sum(s["allocated_size"] for s in segments)
    reserved = sum(s["total_size"] for s in segments)
    events = snapshot["device_traces"][device]
    points = [(allocated, reserved)]
    for event in reversed(events):
        da, dr = _EFFECT.get(event["action"], (0, 0))
        allocated -= da * event["size"]
        reserved -= dr * event["size"]
        points.append((allocated, reserved))
    points.reverse()
    start = events[0]["time_us"] if events else 0
    times = [0.0] + [(e["time_us"] - start) / 1e3 for e in events]
    return times, [p[0] for p in points], [p[1] for p in points]


def memory_timeline(snapshot: dict[str, Any], device: int, title: str, capacity: int | None = None):
    """A matplotlib figure of ``memory_series``: reserved (segments) over allocated (blocks),
    in MiB, emulated counts; ``capacity`` (bytes) adds the core's HBM as a line."""
    times, allocated, reserved = memory_series(snapshot, device)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    mib = 2**20
    ax.fill_between(times, [r / mib for r in reserved], step="post", color="#90caf9",
                    label="reserved (segments)")
    ax.fill_between(times, [a / mib for a in allocated], step="post", color="#1565c0",
                    label="allocated (tensors)")
    if capacity is not None:
        ax.axhline(capacity / mib, color="#c62828", linestyle="--", label="HBM of the core")
    ax.set_xlabel("time since the first recorded event [ms] (host measurement)")
    ax.set_ylabel("MiB (emulated count)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    return fig
