"""Step "Profile of one steady training step": where the device time and memory of a step go.

After the fine-tune, its device copy (compiled kernels met, optimizer state built: a steady
step, compilation excluded) takes one more training step under ``torch.profiler`` (CPU and
PrivateUse1 activity) with the allocator's memory history on. The report shows the step's
projected device timeline (host ops above, queue and engine tracks below), its top kernels
by projected device time, each engine's busy share and MFU (``profiling/pictures.py``), and
one core's allocated and reserved bytes over the step (``html_report/memory_figure.py``).
Device times are projections (eager work: no published band, and the band says why); bytes
are emulated counts of the device's caching allocator; the step's wall time is a host
measurement (with the profiler on). The Chrome trace stays in ``--out`` for Perfetto.
"""
from __future__ import annotations

import base64
import dataclasses
import time
from pathlib import Path

import torch

from ...html_report.figures import png
from ...html_report.markup import e, img, num, table
from ...html_report.memory_figure import memory_series, memory_timeline
from ...profiling.pictures import save, step_pictures, summary_figure
from ..output import MEMORY_PICTURE
from ..report.schema import Check
from .performance import band_notes, band_text, error_band

TITLE = "Profile of one steady training step"
# Why no step is profiled: the first two make the step not_available, the last skipped.
NOT_NEURON = "needs the neuron device (its projected timeline and allocator)"
NO_ACCOUNTING = "needs kernel accounting (TORCHNEURON_KERNEL_ACCOUNTING=0 turns off the projected timeline)"
NO_FINETUNE = "no fine-tuned model to step (--train-steps 0, or the fine-tune did not complete)"
# A profiled step's device time and the accounting's projection of the same work are the same
# model read twice (trace events in whole microseconds): they must agree to rounding.
TRACE_AGREEMENT = 0.01


@dataclasses.dataclass
class ProfileResult:
    reason: str | None = None  # why no step was profiled (not neuron, no fine-tune)
    host_seconds: float | None = None  # the profiled step's wall time, profiler on (host measurement)
    timeline: dict | None = None  # profiling.pictures.device_summary of the step (projected)
    error_band: dict | None = None
    memory: dict | None = None  # one core's bytes over the step (emulated count)
    trace: str | None = None  # the step's Chrome trace, in --out
    busiest_window_ms: tuple | None = None  # the zoomed timeline's stretch, ms from the profile's start
    pictures: dict | None = None  # "timeline", "busiest", "memory": base64 PNG

    def to_data(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _b64(path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode("ascii")


def memory_figures(snapshot: dict, index: int, capacity: int) -> dict:
    """Peak, first and last allocated / reserved bytes of core ``index`` over the snapshot's events."""
    times, allocated, reserved = memory_series(snapshot, index)
    return {"label": "emulated count", "device_index": index, "events": len(times) - 1,
            "recorded_ms": times[-1], "peak_allocated_bytes": max(allocated), "peak_reserved_bytes": max(reserved),
            "start_allocated_bytes": allocated[0], "end_allocated_bytes": allocated[-1],
            "capacity_bytes": capacity}


def run(step, device: torch.device, folder: Path, probe=None) -> tuple[ProfileResult, list[Check]]:
    """Profile one call of ``step`` (a warm training step on ``device``) with the memory history on;
    its figures and pictures (files in ``folder``); with a ``probe`` (``accounting.projected``) the
    check that the trace's device time is the accounting's projection of the same step."""
    from torch.neuron import memory

    index = device.index if device.index is not None else torch.neuron.current_device()
    mark = probe.mark() if probe else None
    taken = {}

    def step_then_snapshot():  # the memory history ends with the step, not with the drawing
        start = time.perf_counter()
        step()
        taken.update(seconds=time.perf_counter() - start, snapshot=memory._snapshot())

    memory._record_memory_history("all", context=None, clear_history=True)
    try:
        drawn = step_pictures(step_then_snapshot, folder)
    finally:
        memory._record_memory_history(None)
    snapshot = taken["snapshot"]
    capacity = torch.neuron.get_device_properties(index).total_memory
    memory_png = save(memory_timeline(snapshot, index, f"{device}: one steady training step"),
                      Path(folder) / MEMORY_PICTURE)
    timeline = drawn["summary"]
    result = ProfileResult(host_seconds=taken["seconds"], timeline=timeline, error_band=error_band("step_seconds", "eager"),
                           memory=memory_figures(snapshot, index, capacity), trace=Path(drawn["trace"]).name,
                           busiest_window_ms=drawn["busiest_window_ms"],
                           pictures={"timeline": _b64(drawn["timeline_png"]), "busiest": _b64(drawn["busiest_png"]),
                                     "memory": _b64(memory_png)})
    checks = [Check("profile: the step's device timeline holds its kernels", timeline["events"] > 0,
                    timeline["events"], 1)]
    if probe:
        projected = probe.since(mark).step.seconds
        gap = abs(timeline["device_seconds"] - projected) / projected if projected else float("inf")
        checks.append(Check("profile: the trace's device time is the projection of the step", gap <= TRACE_AGREEMENT,
                            gap, TRACE_AGREEMENT, f"trace {timeline['device_seconds']:.6f} s, "
                                                  f"accounting {projected:.6f} s (projected)"))
    return result, checks


def run_once(ctx) -> None:
    """One more step of the fine-tuned copy, profiled; the copy is let go afterwards."""
    import torch_neuronx

    from ..perf import probe_for

    trained, ctx.trained = ctx.trained, None
    if ctx.device.type != "neuron":
        ctx.section.result = ProfileResult(reason=NOT_NEURON)
    elif not torch_neuronx.kernel_accounting_enabled():
        ctx.section.result = ProfileResult(reason=NO_ACCOUNTING)
    elif trained is None:
        ctx.section.result = ProfileResult(reason=NO_FINETUNE)
    if ctx.section.result is not None:
        ctx.settle()
        return

    with ctx.part(" (one step)"):
        result, checks = run(trained.step, ctx.device, ctx.workdir, probe_for(ctx.device))
        ctx.add_checks(checks)
        ctx.section.result = result


def status(r: ProfileResult) -> str | None:
    return {NOT_NEURON: "not_available", NO_ACCOUNTING: "not_available", NO_FINETUNE: "skipped"}.get(r.reason)


def summary(r: ProfileResult) -> str:
    if r.reason:
        return r.reason
    t, m = r.timeline, r.memory
    top = t["top"][0]["name"].removesuffix(f" ({t['label']})") if t["top"] else "no kernel"
    mfu = f", MFU {100 * t['mfu']:.2g} %" if t["mfu"] is not None else ""
    return (f"{t['device_seconds'] * 1e3:.3f} ms projected ({band_text(r.error_band)}), top {top}{mfu}; "
            f"peak {m['peak_allocated_bytes'] / 2**20:.1f} MiB allocated, {m['peak_reserved_bytes'] / 2**20:.1f} MiB "
            "reserved (emulated count)")


def html(data: dict) -> str:
    if "timeline" not in data:
        return ""
    t, m = data["timeline"], data["memory"]
    out = [f"<p class='banner'>Device times are <b>projections</b> ({e(band_text(data['error_band']))}); bytes are "
           f"emulated counts; the step took {data['host_seconds']:.3f} s on the host with the profiler on. "
           f"Trace for Perfetto: {e(data['trace'])}.</p>", band_notes([data["error_band"]]),
           img(data["pictures"]["timeline"], "projected device timeline"),
           img(data["pictures"]["busiest"], "projected device timeline, busiest millisecond"),
           img(png(summary_figure(t)), "top kernels, engines and MFU")]
    out.append(table(["kernel or graph", "calls", "projected ms", "share of device time"], [
        [e(k["name"]), e(k["calls"]), num(k["seconds"], "{:.4f}", 1e3),
         num(k["seconds"] / t["device_seconds"] if t["device_seconds"] else None, "{:.1%}")] for k in t["top"]]))
    out.append(table(["engine", "projected busy ms", "utilisation"], [
        [e(name), num(t["engine_busy_seconds"][name], "{:.3g}", 1e3), num(share, "{:.3g} %", 100)]
        for name, share in t["engine_utilisation"].items()]))
    out.append(f"<p>Projected step: {t['device_seconds'] * 1e3:.4f} ms of device time over {e(t['events'])} "
               f"device events, {t['flops']:.3g} FLOPs, MFU {num(t['mfu'], '{:.2g}', 100)} %.</p>")
    out.append(img(data["pictures"]["memory"], "memory over the step"))
    out.append(table(["memory (emulated count)", "MiB"], [
        [label, num(m[key], "{:.2f}", 2**-20)] for key, label in (
            ("start_allocated_bytes", "allocated at the start"), ("peak_allocated_bytes", "peak allocated"),
            ("peak_reserved_bytes", "peak reserved"), ("end_allocated_bytes", "allocated at the end"),
            ("capacity_bytes", "HBM of the core"))]))
    return "".join(out)
