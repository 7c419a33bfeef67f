"""Step "Performance": latency percentiles, throughput and peak memory, measured on any device.

Measured figures are host times (``host``); on the ``neuron`` device the same
requests and fine-tune steps are also projected onto the chosen Trainium
instance (``projected``, docs/projection.md) and shown beside them.
"""
from __future__ import annotations

import dataclasses

from .. import perf
from ...projection import LABEL
from ..report import plots
from ..report.markup import e, img, num, table

TITLE = "Performance"


@dataclasses.dataclass
class PerformanceResult:
    generation: dict[str, dict] = dataclasses.field(default_factory=dict)  # mode -> perf.measure_generation()
    inference_memory: dict | None = None
    train_samples_per_second: float | None = None
    training_memory: dict | None = None
    projected_training: dict | None = None  # projected seconds per step, samples/s, MFU
    projection: dict | None = None  # metrics()["projection"] of the whole run: by op, by engine

    def to_data(self) -> dict:
        data = {"generation": dict(self.generation)} if self.generation else {}
        data.update({k: v for k, v in dataclasses.asdict(self).items() if k != "generation" and v is not None})
        return data


def run(result: PerformanceResult, mode: str, dev_model, batches: dict, gen_tokens: int, iters: int, device,
        advance) -> None:
    result.generation[mode] = perf.measure_generation(dev_model, batches, gen_tokens, iters, device, advance)


def project_training(window, steps: int, rows: int, projector, price_per_hour: float | None = None) -> dict | None:
    """Projected fine-tune figures from ``window`` (a ``WindowProjection`` of ``steps`` eager
    device steps of ``rows`` samples): its first-run compile (every kernel signature it ran,
    empty NEFF cache) and the run's cost, both from ``projector``."""
    seconds = window.step.seconds
    if not steps or not seconds:
        return None
    compile_ = projector.compile(eager_kernels=window.eager_kernels, graphs=())
    run = projector.cost(seconds / steps, steps, price_per_hour, compile_.seconds)
    return {"label": LABEL, "seconds_per_step": run.step_seconds, "samples_per_second": rows * steps / seconds,
            "mfu": window.step.mfu, "kernel_signatures": window.eager_kernels, "compile": compile_.to_dict(),
            "cost": run.to_dict()}


def status(r: PerformanceResult) -> str | None:
    return None if r.generation else "not_available"


def summary(r: PerformanceResult) -> str:
    parts = [f"{m}: TTFT p50 {g['ttft_seconds']['p50'] * 1e3:.1f} ms"
             + (f", per token p50 {g['per_token_seconds']['p50'] * 1e3:.1f} ms"
                if g["per_token_seconds"]["p50"] is not None else "")
             + (f" (host); projected TTFT p50 {g['projected']['ttft_seconds']['p50'] * 1e3:.3f} ms"
                if "projected" in g else "")
             for m, g in r.generation.items()]
    return "; ".join(parts) or "no mode ran"


def html(data: dict) -> str:
    out = []
    rows = []
    for mode, g in data.get("generation", {}).items():
        for length, s in g["shapes"].items():
            t, p = s["ttft_seconds"], s["per_token_seconds"]
            rows.append([e(mode), e(length), e(s["batch_size"])]
                        + [num(t[k], "{:.2f}", 1e3) for k in ("p50", "p95", "p99")]
                        + [num(p[k], "{:.2f}", 1e3) for k in ("p50", "p95", "p99")]
                        + [num(s["prefill_tokens_per_second"], "{:.0f}"), num(s["decode_tokens_per_second"], "{:.0f}"),
                           num(s["cold_ttft_seconds"], "{:.3f}")])
    if rows:
        out.append(table(["mode", "seq len", "batch", "TTFT p50 ms", "p95", "p99", "per-token p50 ms", "p95", "p99",
                          "prefill tok/s", "decode tok/s", "cold TTFT s"], rows))
    mem_rows = []
    for key, label in (("inference_memory", "inference"), ("training_memory", "fine-tune")):
        m = data.get(key)
        if m:
            mem_rows.append([label, e(m["scope"]), num(m["peak_bytes"], "{:.1f}", 2**-20),
                             num(m["capacity_bytes"], "{:.1f}", 2**-30), num(m["peak_fraction"], "{:.4%}")])
    if mem_rows:
        out.append(table(["phase", "scope", "peak MiB", "capacity GiB", "peak / capacity"], mem_rows))
    if data.get("train_samples_per_second") is not None:
        out.append(f"<p>Training throughput (host): {data['train_samples_per_second']:.2f} samples/s.</p>")
    out.append(img(plots.latency(data.get("generation", {})), "latency distribution"))
    out.append(_projected_html(data))
    return "".join(out)


def _projected_html(data: dict) -> str:
    """Projected figures beside the host ones, and where the projected time goes."""
    rows = []
    for mode, g in data.get("generation", {}).items():
        for length, s in g["shapes"].items():
            p = s.get("projected")
            if p:
                rows.append([e(mode), e(length)] + [num(x, "{:.4f}", 1e3) for x in (
                    s["ttft_seconds"]["p50"], p["ttft_seconds"]["p50"], s["per_token_seconds"]["p50"],
                    p["per_token_seconds"]["p50"])] + [num(s["decode_tokens_per_second"], "{:.0f}"),
                                                       num(p["decode_tokens_per_second"], "{:.0f}"),
                                                       num(p["mfu"], "{:.2%}")])
    training = data.get("projected_training")
    if not rows and not training:
        return ""
    out = ['<h3>Projected on Trainium</h3><p class="banner">Projected figures come from the device model '
           "(docs/projection.md): one logical NeuronCore, documented efficiency factors; host figures are "
           "measured on the host CPU.</p>"]
    if rows:
        out.append(table(["mode", "seq len", "host TTFT p50 ms", "projected TTFT p50 ms", "host per-token p50 ms",
                          "projected per-token p50 ms", "host decode tok/s", "projected decode tok/s",
                          "projected MFU"], rows))
    if training:
        out.append(table(["fine-tune", "host", "projected"], [
            ["samples/s", num(data.get("train_samples_per_second"), "{:.2f}"),
             num(training["samples_per_second"], "{:.1f}")],
            ["MFU", "", num(training["mfu"], "{:.2%}")]]))
    out.append(img(plots.projected_vs_host(data), "projected vs host"))
    projection = data.get("projection") or {}
    out.append(img(plots.projected_by_op(projection.get("eager", {}).get("by_op", {})),
                   "projected time per op"))
    return "".join(out)
