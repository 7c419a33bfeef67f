"""Step "Cost": cost per completed job, seconds × the instance's price per hour.

Two bases side by side. *Measured*: the seconds the run took; priced only on a real
device (``--device cuda --price-per-hour``): on the emulated device they are host-CPU
time, which is not Trainium time, so they are shown unpriced. *Projected*: the device
model's seconds for the same jobs on the chosen instance, with one first-run compile
figure per mode (docs/projection.md), priced at the instance's rate.
Every projected second and dollar here is displayed from the projection's typed
results (``Projector.cost``, ``Projector.compile``), never recomputed; the price
is the projection's ``Price`` (dated table entry or ``--price-per-hour``), whose
``usd()`` is the one hours→seconds conversion.
"""
from __future__ import annotations

import dataclasses

from ...html_report.markup import e, num, table
from ...projection import LABEL, Price, price as price_table
from .compilation import CompilationResult
from .finetune import FinetuneResult
from .performance import COMPILE_TIME_BASIS, PerformanceResult, band_note, band_notes, band_text

TITLE = "Cost"


@dataclasses.dataclass
class CostResult:
    price_per_hour_usd: float | None
    price_source: str
    time_basis: str
    generation: dict[str, dict]  # mode -> {job, seconds, generated_tokens, cost_usd, cost_per_million_tokens_usd}
    compile_overhead: dict  # measured cold-call overhead (host) and the projected compile of each mode
    finetune: dict | None = None
    projected: dict | None = None  # the same jobs at projected Trainium seconds

    def to_data(self) -> dict:
        data = {"generation": self.generation}
        if self.finetune is not None:
            data["finetune"] = self.finetune
        if self.projected is not None:
            data["projected"] = self.projected
        data.update(compile_overhead=self.compile_overhead, price_per_hour_usd=self.price_per_hour_usd,
                    price_source=self.price_source, time_basis=self.time_basis)
        return data


def price_for(device_type: str, user_price: float | None, instance: str | None) -> Price:
    """The hourly price to use and where it comes from (the projection's dated price table)."""
    if user_price is not None:
        return Price(instance or f"{device_type} machine", float(user_price), "--price-per-hour")
    if device_type != "neuron":
        return Price(f"{device_type} machine", None, f"no price for a {device_type} machine; pass --price-per-hour")
    p = price_table(instance)
    if p.usd_per_hour is None:
        return dataclasses.replace(p, source=f"{p.source} (--price-per-hour)")
    return dataclasses.replace(p, source=f"{p.instance} on-demand, {p.region}, {p.date}: {p.source}")


def time_basis(device_type: str, emulated: bool) -> str:
    if emulated:
        return ("emulated-host time: measured on the host CPU that emulates the NeuronCore, "
                "not Trainium execution time")
    return f"measured on {device_type}"


def _largest_shape(measured: dict) -> tuple[str, dict]:
    longest = max(measured["shapes"], key=int)
    return longest, measured["shapes"][longest]


def _per_token(usd: float | None, tokens: int) -> float | None:
    return usd * 1e6 / tokens if usd is not None else None


def _projected(gen_tokens: int, performance: PerformanceResult, projector, user_price: float | None) -> dict | None:
    """The same jobs at projected device seconds: a request is the projected sum of its own
    prefill and decode windows; the fine-tune run comes priced, with its compile, from the
    performance step."""
    jobs = {}
    for mode, measured in performance.generation.items():
        _, shape = _largest_shape(measured)
        if "projected" in shape and projector is not None:
            run = projector.cost(shape["projected"]["request_seconds"]["p50"], 1, user_price)
            tokens = shape["batch_size"] * gen_tokens
            jobs[mode] = {"seconds": run.run_seconds, "generated_tokens": tokens, "cost_usd": run.run_usd,
                          "cost_per_million_tokens_usd": _per_token(run.run_usd, tokens),
                          "error_band": shape["projected"]["error_band"]}  # a request is mostly decode
    training = performance.projected_training
    if not jobs and training is None:
        return None
    data = {"label": LABEL, "generation": jobs}
    if training is not None:
        data["training_run"] = {"job": f"{training['cost']['steps']} fine-tune steps, first run "
                                       "(empty NEFF cache: compile included)", **training["cost"],
                                "compile_basis": training["compile"]["basis"]}
    return data


def _projected_compiles(compilation: CompilationResult, projector, user_price: float | None) -> dict:
    """Per mode: the projected first-run compile (projection's one model) and what it costs."""
    out = {}
    for mode, entry in compilation.modes.items():
        c = entry.get("projected_compile")
        if c is None or projector is None:
            continue
        priced = projector.cost(0.0, 0, user_price, c["seconds"])
        out[mode] = {"seconds": c["seconds"], "cost_usd": priced.compile_usd, "basis": c["basis"],
                     "error_band": {"relative": None, "basis": COMPILE_TIME_BASIS}}
    return out


def run(price: Price, basis: str, gen_tokens: int, device_type: str,
        compilation: CompilationResult, performance: PerformanceResult,
        finetune: FinetuneResult | None, projector=None, user_price: float | None = None) -> CostResult:
    """Per mode one generation request of the largest known shape; the fine-tune; the compile
    overhead; and, with a ``projector`` (neuron), the same jobs at projected Trainium seconds."""
    usd = (lambda seconds: None) if device_type == "neuron" else price.usd  # host time is not Trainium's
    jobs = {}
    for mode, measured in performance.generation.items():
        longest, shape = _largest_shape(measured)
        seconds = shape["ttft_seconds"]["p50"] + (gen_tokens - 1) * (shape["per_token_seconds"]["p50"] or 0.0)
        tokens = shape["batch_size"] * gen_tokens
        jobs[mode] = {"job": f"one greedy request: batch {shape['batch_size']} × {longest} prompt tokens, "
                             f"{gen_tokens} new tokens each (p50 latencies)",
                      "seconds": seconds, "generated_tokens": tokens, "cost_usd": usd(seconds),
                      "cost_per_million_tokens_usd": _per_token(usd(seconds), tokens)}
    ft = None
    if finetune is not None:
        seconds = sum(finetune.device_step_seconds)
        ft = {"job": f"{len(finetune.device_step_seconds)} fine-tune steps", "seconds": seconds,
              "cost_usd": usd(seconds)}
    cold = sum(s["cold"]["seconds"] - s["warm"]["seconds"]
               for m in compilation.modes.values() for s in m.get("shapes", {}).values())
    overhead = {"measured_cold_seconds": cold, "measured_cold_cost_usd": usd(cold),
                "projected_first_run": _projected_compiles(compilation, projector, user_price)}
    projected = _projected(gen_tokens, performance, projector, user_price)
    return CostResult(price.usd_per_hour, price.source, basis, jobs, overhead, ft, projected)


def run_once(ctx) -> None:
    """Last: prices the other steps' results."""
    import torch

    from ...projection import get_projector

    neuron = ctx.device.type == "neuron"
    instance = torch.neuron.topology().profile.name if neuron else None
    user_price = ctx.cfg.price_per_hour
    with ctx.part():
        ctx.section.result = run(price_for(ctx.device.type, user_price, instance),
                                 ctx.recorder.report.environment.time_basis, ctx.cfg.gen_tokens, ctx.device.type,
                                 ctx.result("compilation"), ctx.result("performance"), ctx.result("finetune"),
                                 projector=get_projector() if neuron else None, user_price=user_price)


def status(r: CostResult) -> str | None:
    return "not_available" if r.price_per_hour_usd is None else None


def summary(r: CostResult) -> str:
    if r.price_per_hour_usd is None:
        return r.price_source
    priced = {m: j for m, j in r.generation.items() if j["cost_usd"] is not None}
    parts = [("; ".join(f"{m}: ${j['cost_usd']:.6f} per request" for m, j in priced.items())
              + f" at ${r.price_per_hour_usd:.2f}/h ({r.time_basis.split(':')[0]})")] if priced else []
    projected = (r.projected or {}).get("generation", {})
    if projected:
        parts.append("projected: " + "; ".join(
            f"{m}: ${j['cost_per_million_tokens_usd']:.4f} per 1M generated tokens ({band_text(j['error_band'])})"
            for m, j in projected.items()) + f" at ${r.price_per_hour_usd:.2f}/h")
    return "; ".join(parts) or f"not priced: {r.time_basis}"


def html(data: dict) -> str:
    if not data.get("compile_overhead"):
        return ""
    unpriced = all(j["cost_usd"] is None for j in data.get("generation", {}).values())
    out = [f'<p class="banner">{e(data.get("time_basis", ""))}'
           + ("; measured times are not priced, the projected ones are" if unpriced else "")
           + f'. Price: {num(data.get("price_per_hour_usd"), "${:.2f}/h")} ({e(data.get("price_source"))}).</p>',
           _projected_html(data.get("projected"))]  # first: the figures that are Trainium's
    out.append(f"<h3>Measured in this run ({e(data.get('time_basis', '').split(':')[0])})</h3>")
    rows = [[e(mode), e(j["job"]), num(j["seconds"], "{:.4f}"), num(j["cost_usd"], "${:.8f}"),
             num(j["cost_per_million_tokens_usd"], "${:.4f}")] for mode, j in data.get("generation", {}).items()]
    if rows:
        out.append(table(["mode", "job", "seconds", "cost per job", "per 1M generated tokens"], rows))
    ft = data.get("finetune")
    if ft:
        out.append(table(["job", "seconds", "cost"], [[e(ft["job"]), num(ft["seconds"], "{:.3f}"),
                                                       num(ft["cost_usd"], "${:.8f}")]]))
    co = data["compile_overhead"]
    rows = [["measured cold-call overhead (this run, host)", num(co.get("measured_cold_seconds"), "{:.2f}"),
             num(co.get("measured_cold_cost_usd"), "${:.8f}"), "host measurement"]]
    rows += [[f"projected first-run neuronx-cc time, {e(mode)}", num(c["seconds"], "{:.1f}"),
              num(c["cost_usd"], "${:.8f}"), e(f"{c['basis']}; {band_note(c['error_band'])}")]
             for mode, c in co.get("projected_first_run", {}).items()]
    out.append(table(["compile overhead", "seconds", "cost", "basis"], rows))
    return "".join(out)


def _projected_html(projected: dict | None) -> str:
    if not projected:
        return ""
    out = ["<h3>Projected on Trainium</h3>"]
    rows = [[e(mode), num(j["seconds"], "{:.6f}"), num(j["cost_usd"], "${:.10f}"),
             num(j["cost_per_million_tokens_usd"], "${:.4f}"), e(band_text(j["error_band"]))]
            for mode, j in projected["generation"].items()]
    if rows:
        out.append(table(["mode", "projected seconds per request", "projected cost per request",
                          "projected per 1M generated tokens", "error band"], rows))
    t = projected.get("training_run")
    if t:
        out.append(table(["job", "projected run seconds", "projected first-run compile seconds",
                          "projected cost (run + compile)", "error band"],
                         [[e(t["job"]), num(t["run_seconds"], "{:.4f}"), num(t["compile_seconds"], "{:.1f}"),
                           num(t["total_usd"], "${:.6f}"), e(band_text(t["error_band"]))]]))
        out.append(f"<p class='muted'>compile basis: {e(t['compile_basis'])}</p>")
    out.append(band_notes([j["error_band"] for j in projected["generation"].values()]
                          + ([t["error_band"]] if t else [])))
    return "".join(out)
