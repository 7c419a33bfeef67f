"""Step "Performance": latency percentiles, throughput and peak memory, measured on any device.

Measured figures are host times (``host``); on the ``neuron`` device the same
requests and fine-tune steps are also projected onto the chosen Trainium
instance (``projected``, docs/projection.md) and shown beside them. Every
projected figure carries its error band as the plan's do: the leave-one-out
error against AWS's published results for compiled graphs, and for eager
work (which AWS publishes nothing about) a band of ``None`` that says why.
"""
from __future__ import annotations

import dataclasses

from ...html_report.markup import e, img, num, table
from .. import perf
from ...projection import LABEL, error_band as published_band
from ..report import plots

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


RESULT = PerformanceResult  # made empty before the first mode: a step no mode reached says so


EAGER_BASIS = ("eager execution: AWS publishes no eager Trainium result to hold the projection against "
               "(the band is measured on compiled graphs)")
COMPILE_TIME_BASIS = "AWS publishes no first-run compile times to hold the compile model against"


def error_band(figure: str, mode: str) -> dict:
    """The band of a projected figure derived from ``figure`` (``step_seconds``, ``ttft_seconds``,
    ``tpot_seconds``) when the work ran in ``mode``: the published leave-one-out band for
    compiled graphs (``projection.error_band``), none for eager work."""
    if mode != "compile":
        return {"relative": None, "basis": EAGER_BASIS}
    band = published_band(figure)
    return {"relative": band.fraction, "basis": band.text()}


def band_text(band: dict) -> str:
    """``±13 %`` or ``no band``: the short form printed next to a projected figure."""
    return "no band" if band["relative"] is None else f"±{band['relative']:.0%}"


def run(result: PerformanceResult, mode: str, dev_model, batches: dict, gen_tokens: int, iters: int, device,
        advance) -> None:
    result.generation[mode] = add_bands(perf.measure_generation(dev_model, batches, gen_tokens, iters, device,
                                                                advance), mode)


def run_mode(ctx, mode: str) -> None:
    """Timed requests of every known shape; the peak memory of the inference so far."""
    cfg = ctx.cfg
    with ctx.part(f" ({mode})", total=cfg.iters * len(ctx.known.batches)) as advance:
        run(ctx.section.result, mode, ctx.model, ctx.known.batches, cfg.gen_tokens, cfg.iters, ctx.device, advance)
    ctx.section.result.inference_memory = perf.peak_memory(ctx.device)


def add_bands(generation: dict, mode: str) -> dict:
    """``generation`` (``perf.measure_generation()`` of ``mode``) with the bands beside its projected
    figures: TTFT and prefill throughput carry the prefill graph's (``ttft_error_band``), the
    rest (per token, whole request, decode throughput, MFU) the decode graph's (``error_band``)."""
    for projected in [s["projected"] for s in generation["shapes"].values() if "projected" in s] + (
            [generation["projected"]] if "projected" in generation else []):
        projected.update(ttft_error_band=error_band("ttft_seconds", mode), error_band=error_band("tpot_seconds", mode))
    return generation


def project_training(window, steps: int, rows: int, projector, price_per_hour: float | None = None) -> dict | None:
    """Projected fine-tune figures from ``window`` (a ``WindowProjection`` of ``steps`` eager
    device steps of ``rows`` samples): its first-run compile (every kernel signature it ran,
    empty NEFF cache) and the run's cost, both from ``projector``, each with its band."""
    seconds = window.step.seconds
    if not steps or not seconds:
        return None
    compile_ = projector.compile(eager_kernels=window.eager_kernels, graphs=())
    run = projector.cost(seconds / steps, steps, price_per_hour, compile_.seconds)
    return {"label": LABEL, "seconds_per_step": run.step_seconds, "samples_per_second": rows * steps / seconds,
            "mfu": window.step.mfu, "kernel_signatures": window.eager_kernels,
            "error_band": error_band("step_seconds", "eager"),  # the pilot fine-tunes eagerly
            "compile": {**compile_.to_dict(), "error_band": {"relative": None, "basis": COMPILE_TIME_BASIS}},
            "cost": {**run.to_dict(), "error_band": error_band("step_seconds", "eager")}}


def status(r: PerformanceResult) -> str | None:
    return None if r.generation else "not_available"


def summary(r: PerformanceResult) -> str:
    parts = [f"{m}: TTFT p50 {g['ttft_seconds']['p50'] * 1e3:.1f} ms"
             + (f", per token p50 {g['per_token_seconds']['p50'] * 1e3:.1f} ms"
                if g["per_token_seconds"]["p50"] is not None else "")
             + (f" (host); projected TTFT p50 {g['projected']['ttft_seconds']['p50'] * 1e3:.3f} ms "
                f"({band_text(g['projected']['ttft_error_band'])})" if "projected" in g else "")
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
                             num(m.get("peak_reserved_bytes"), "{:.1f}", 2**-20),
                             num(m["capacity_bytes"], "{:.1f}", 2**-30), num(m["peak_fraction"], "{:.4%}")])
    if mem_rows:
        out.append(table(["phase", "scope", "peak MiB", "peak reserved MiB", "capacity GiB", "peak / capacity"],
                         mem_rows))
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
                                                       num(p["mfu"], "{:.2%}"),
                                                       e(f"TTFT {band_text(p['ttft_error_band'])}, "
                                                         f"rest {band_text(p['error_band'])}")])
    training = data.get("projected_training")
    if not rows and not training:
        return ""
    out = ['<h3>Projected on Trainium</h3><p class="banner">Projected figures come from the device model '
           "(docs/projection.md): one logical NeuronCore, factors fitted on AWS's published Trainium results; "
           "host figures are measured on the host CPU.</p>"]
    if rows:
        out.append(table(["mode", "seq len", "host TTFT p50 ms", "projected TTFT p50 ms", "host per-token p50 ms",
                          "projected per-token p50 ms", "host decode tok/s", "projected decode tok/s",
                          "projected MFU", "error band"], rows))
    if training:
        out.append(table(["fine-tune", "host", "projected", "error band"], [
            ["samples/s", num(data.get("train_samples_per_second"), "{:.2f}"),
             num(training["samples_per_second"], "{:.1f}"), e(band_text(training["error_band"]))],
            ["MFU", "", num(training["mfu"], "{:.2%}"), e(band_text(training["error_band"]))]]))
    out.append(band_notes([b for g in data.get("generation", {}).values() for s in g["shapes"].values()
                            if "projected" in s for b in (s["projected"]["ttft_error_band"],
                                                          s["projected"]["error_band"])]
                           + ([training["error_band"]] if training else [])))
    out.append(img(plots.projected_vs_host(data), "projected vs host"))
    projection = data.get("projection") or {}
    out.append(img(plots.projected_by_op(projection.get("eager", {}).get("by_op", {})),
                   "projected time per op"))
    return "".join(out)


def band_note(band: dict) -> str:
    """Where a ± comes from (its basis says it), or why there is none."""
    return band["basis"] if band["relative"] is not None else f"no band: {band['basis']}"


def band_notes(bands: list[dict]) -> str:
    """One line per distinct band."""
    notes = dict.fromkeys(band_note(b) for b in bands)
    return "".join(f"<p class='muted'>{e(n)}</p>" for n in notes)
