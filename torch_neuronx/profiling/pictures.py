"""Pictures of a profile's projected device timeline, drawn from its exported Chrome trace.

What a report shows of one profiled step: the timeline (host ops above, the
device's queue, engines and collectives below, as Perfetto lays them out) and
a summary (the kernels that take the most device time, each engine's busy
share, MFU). They are read from the trace file ``export_chrome_trace`` or
``NeuronProfiler`` wrote, so a picture shows exactly what the trace holds.
Every device figure is a projection; host times are host measurements.

    python -m torch_neuronx.profiling.pictures TRACE.json --timeline t.png [--window 0 5] --summary s.png
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .. import projection  # noqa: E402
from .timeline import COLLECTIVES, ENGINE_TRACKS, LABEL, QUEUE  # noqa: E402

_COLOURS = {"TensorE": "#4c72b0", "VectorE": "#55a868", "ScalarE": "#c44e52", "GpSimd": "#8172b2",
            "DMA": "#ccb974", QUEUE: "#64b5cd", COLLECTIVES: "#dd8452", "host": "#999999"}


def read_trace(trace) -> dict:
    """A trace as a dict: ``trace`` is one already, or the path of a JSON file."""
    if isinstance(trace, dict):
        return trace
    with open(trace, encoding="utf-8") as f:
        return json.load(f)


def _rows(trace: dict) -> dict[tuple, str]:
    """(pid, tid) -> row name, from the trace's thread_name records."""
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name"}


def device_summary(trace, top: int = 10) -> dict:
    """Where the device time of ``trace`` went (projected): the ``top`` kernels by device time,
    each engine's busy time and its share of the device time (the projected step time: on the
    emulator the device also waits for the slower host, which Trainium would not), FLOPs, MFU."""
    events = read_trace(trace)["traceEvents"]
    device = [e for e in events if e.get("cat") == "kernel" and e.get("args", {}).get("label") == LABEL]
    spans = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    by_name: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for e in device:
        by_name[e["name"]][0] += 1
        by_name[e["name"]][1] += e["dur"]
    seconds = sum(e["dur"] for e in device) / 1e6
    span = (max(e["ts"] + e["dur"] for e in device) - min(e["ts"] for e in device)) / 1e6 if device else 0.0
    busy: dict[str, float] = dict.fromkeys(ENGINE_TRACKS.values(), 0.0)
    for e in spans:
        busy[e["name"]] = busy.get(e["name"], 0.0) + e["dur"] / 1e6
    flops = sum(e["args"].get("projection", {}).get("flops", 0) for e in device)
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]
    return {"label": LABEL, "device_seconds": seconds, "span_seconds": span, "events": len(device),
            "top": [{"name": n, "calls": c, "seconds": us / 1e6} for n, (c, us) in ranked],
            "engine_busy_seconds": busy,
            "engine_utilisation": {k: (v / seconds if seconds else 0.0) for k, v in busy.items()},
            "flops": flops, "mfu": projection.get_projector().mfu(flops, seconds)}


def timeline_figure(trace, title: str = "projected device timeline", window_ms: tuple | None = None):
    """Host threads (CPU ops) above the device's rows, on one time axis in ms from the
    profile's first event; ``window_ms`` = (from, to) zooms in."""
    trace = read_trace(trace)
    rows = _rows(trace)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    start = min(e["ts"] for e in events)
    if window_ms is not None:
        events = [e for e in events if e["ts"] + e["dur"] >= start + window_ms[0] * 1e3
                  and e["ts"] <= start + window_ms[1] * 1e3]
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_user_annotation")]
    host_rows = sorted({(e["pid"], e["tid"]) for e in events if e.get("cat") == "cpu_op"}, key=str)
    device_rows = sorted({(e["pid"], e["tid"]) for e in device}, key=lambda r: r[1])
    order = host_rows + device_rows
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(order) + 1.6))
    for i, row in enumerate(order):
        name = rows.get(row, f"thread {row[1]}")
        colour = _COLOURS.get(name, _COLOURS["host"])
        bars = [((e["ts"] - start) / 1e3, max(e["dur"], 0.5) / 1e3) for e in events
                if (e["pid"], e["tid"]) == row and e.get("cat") in ("cpu_op", "kernel", "gpu_user_annotation")]
        # a thin white edge keeps back-to-back events apart (a busy queue is a row of them)
        ax.broken_barh(bars, (len(order) - i - 0.8, 0.6), facecolors=colour, edgecolors="white", linewidth=0.3)
    ax.set_yticks([len(order) - i - 0.5 for i in range(len(order))])
    ax.set_yticklabels([("host: " if r in host_rows else "") + rows.get(r, f"thread {r[1]}") for r in order])
    ax.set_xlabel("ms from the start of the profile (host: measured; device: projected)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    if window_ms is not None:
        ax.set_xlim(*window_ms)
    return fig


def summary_figure(summary: dict, title: str = "one step on the projected device"):
    """Top kernels by device time, engine busy shares and MFU, side by side."""
    fig, (top, engines) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    names = [t["name"].replace(f" ({LABEL})", "") for t in summary["top"]][::-1]
    top.barh(names, [t["seconds"] * 1e3 for t in summary["top"]][::-1], color=_COLOURS[QUEUE])
    top.set_xlabel("projected device ms (launch included)")
    top.set_title("kernels and graphs by device time")
    util = summary["engine_utilisation"]
    engines.bar(list(util), [100 * v for v in util.values()], color=[_COLOURS.get(k, "#999") for k in util])
    engines.set_ylabel("% of the projected device time busy")
    mfu = summary["mfu"]
    engines.set_title(f"engines; MFU {100 * mfu:.2g} %" if mfu is not None else "engines")
    fig.suptitle(f"{title}: {summary['device_seconds'] * 1e3:.3f} ms projected over "
                 f"{summary['events']} device events")
    return fig


def save(fig, path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=96)
    plt.close(fig)
    return os.fspath(path)


def step_pictures(step, folder) -> dict:
    """Profile one call of ``step`` (warm: its kernels and graphs met before) with CPU and device
    activity, and draw it into ``folder``: the trace, the timeline and summary PNGs, the summary.
    What a report shows of one steady step."""
    from torch.profiler import ProfilerActivity, profile

    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
    trace_path = os.path.join(folder, "step-trace.json")
    prof.export_chrome_trace(trace_path)
    trace = read_trace(trace_path)
    summary = device_summary(trace)
    return {"trace": trace_path, "summary": summary,
            "timeline_png": save(timeline_figure(trace), os.path.join(folder, "step-timeline.png")),
            "summary_png": save(summary_figure(summary), os.path.join(folder, "step-summary.png"))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Draw a profile's projected device timeline and summary.")
    parser.add_argument("trace", help="a Chrome trace written by export_chrome_trace or NeuronProfiler")
    parser.add_argument("--timeline", help="PNG of the timeline")
    parser.add_argument("--window", type=float, nargs=2, metavar=("FROM_MS", "TO_MS"),
                        help="the timeline between these times (ms from the profile's first event)")
    parser.add_argument("--summary", help="PNG of top kernels, engine busy shares and MFU")
    args = parser.parse_args(argv)
    trace = read_trace(args.trace)
    if args.timeline:
        print(save(timeline_figure(trace, window_ms=args.window), args.timeline))
    if args.summary:
        print(save(summary_figure(device_summary(trace)), args.summary))


if __name__ == "__main__":
    main(sys.argv[1:])
