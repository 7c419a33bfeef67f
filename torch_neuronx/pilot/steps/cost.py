"""Step "Cost": cost per completed job, seconds × the instance's price per hour.

Two bases side by side. *Host*: the measured seconds, which on the emulated
device are host-CPU time, not Trainium time (the report says so next to every
figure). *Projected*: the device model's seconds for the same jobs on the
chosen instance (docs/projection.md), plus the first-run compile hours. The
price is the dated entry of the projection's price table (source, date,
region), or ``--price-per-hour``. The compile overhead uses the fidelity
layer's *estimated* neuronx-cc seconds, since the emulator's compile is not
Trainium's compiler.
"""
from __future__ import annotations

import dataclasses

from ...projection import price as price_table
from ..report.markup import e, num, table
from .compilation import CompilationResult
from .finetune import FinetuneResult
from .performance import PerformanceResult

TITLE = "Cost"


@dataclasses.dataclass
class CostResult:
    price_per_hour_usd: float | None
    price_source: str
    time_basis: str
    generation: dict[str, dict]  # mode -> {job, seconds, generated_tokens, cost_usd, cost_per_million_tokens_usd}
    compile_overhead: dict
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


def price_for(device_type: str, user_price: float | None, instance: str | None) -> tuple[float | None, str]:
    """The hourly price to use and where it comes from (the projection's dated price table)."""
    if user_price is not None:
        return user_price, "--price-per-hour"
    if device_type != "neuron":
        return None, f"no price for a {device_type} machine; pass --price-per-hour"
    p = price_table(instance)
    if p["usd_per_hour"] is None:
        return None, f"{p['source']} (--price-per-hour)"
    return p["usd_per_hour"], f"{p['instance']} on-demand, {p['region']}, {p['date']}: {p['source']}"


def time_basis(device_type: str, emulated: bool) -> str:
    if emulated:
        return ("emulated-host time: measured on the host CPU that emulates the NeuronCore, "
                "not Trainium execution time")
    return f"measured on {device_type}"


def _request(shape: dict, gen_tokens: int, per_hour) -> dict:
    """One greedy request of ``shape`` (p50 latencies): seconds, tokens and what they cost."""
    seconds = shape["ttft_seconds"]["p50"] + (gen_tokens - 1) * (shape["per_token_seconds"]["p50"] or 0.0)
    tokens = shape["batch_size"] * gen_tokens
    cost = per_hour(seconds)
    return {"seconds": seconds, "generated_tokens": tokens, "cost_usd": cost,
            "cost_per_million_tokens_usd": cost * 1e6 / tokens if cost is not None else None}


def _projected(gen_tokens: int, performance: PerformanceResult, finetune: FinetuneResult | None,
               seconds_per_kernel: float | None, per_hour) -> dict | None:
    """The same jobs at projected device seconds; a training run includes its first-run
    compile: every kernel signature of its steps compiled once (an empty NEFF cache)."""
    jobs = {}
    for mode, measured in performance.generation.items():
        longest = max(measured["shapes"], key=int)
        shape = measured["shapes"][longest]
        if "projected" in shape:
            jobs[mode] = _request({**shape["projected"], "batch_size": shape["batch_size"]}, gen_tokens, per_hour)
    training = performance.projected_training
    if not jobs and training is None:
        return None
    data = {"label": "projected", "generation": jobs}
    if training is not None and finetune is not None:
        steps = len(finetune.device_step_seconds)
        run_seconds = training["seconds_per_step"] * steps
        compile_s = training["kernel_signatures"] * (seconds_per_kernel or 0.0)
        data["training_run"] = {
            "job": f"{steps} fine-tune steps, first run (empty NEFF cache: compile included)",
            "steps": steps, "seconds": run_seconds, "compile_seconds": compile_s,
            "cost_usd": per_hour(run_seconds), "compile_cost_usd": per_hour(compile_s),
            "total_cost_usd": per_hour(run_seconds + compile_s)}
    return data


def run(price: float | None, source: str, basis: str, gen_tokens: int, device_type: str,
        compilation: CompilationResult, performance: PerformanceResult,
        finetune: FinetuneResult | None) -> CostResult:
    """Per mode one generation request of the largest known shape; the fine-tune; the compile
    overhead; and the same jobs at projected Trainium seconds when they were projected."""
    per_hour = (lambda s: s * price / 3600) if price is not None else (lambda s: None)
    jobs = {}
    for mode, measured in performance.generation.items():
        longest = max(measured["shapes"], key=int)
        shape = measured["shapes"][longest]
        jobs[mode] = {"job": f"one greedy request: batch {shape['batch_size']} × {longest} prompt tokens, "
                             f"{gen_tokens} new tokens each (p50 latencies)",
                      **_request(shape, gen_tokens, per_hour)}
    ft = None
    if finetune is not None:
        seconds = sum(finetune.device_step_seconds)
        ft = {"job": f"{len(finetune.device_step_seconds)} fine-tune steps", "seconds": seconds,
              "cost_usd": per_hour(seconds)}
    eager_shapes = compilation.modes.get("eager", {}).get("shapes", {})
    # the fidelity layer's projected neuronx-cc time exists only for the neuron device's eager mode
    estimate = (sum(s["cold"]["estimated_compile_seconds"] or 0.0 for s in eager_shapes.values())
                if eager_shapes and device_type == "neuron" else None)
    per_kernel = (compilation.modes.get("eager", {}).get("fidelity") or {}).get("compile_seconds_per_kernel_estimate")
    # what a first run with an empty NEFF cache would pay: every kernel signature of the
    # cold calls compiled (an upper bound: a signature shared by two shapes counts twice)
    empty_cache = (sum(s["cold"]["kernel_signatures"] or 0 for s in eager_shapes.values()) * per_kernel
                   if estimate is not None and per_kernel else None)
    cold = sum(s["cold"]["seconds"] - s["warm"]["seconds"]
               for m in compilation.modes.values() for s in m.get("shapes", {}).values())
    overhead = {
        "measured_cold_seconds": cold,
        "measured_cold_cost_usd": per_hour(cold),
        "estimated_neuronx_cc_seconds": estimate,
        "estimated_neuronx_cc_cost_usd": per_hour(estimate) if estimate is not None else None,
        "estimated_empty_cache_seconds": empty_cache,
        "estimated_empty_cache_cost_usd": per_hour(empty_cache) if empty_cache is not None else None,
    }
    projected = _projected(gen_tokens, performance, finetune, per_kernel, per_hour)
    return CostResult(price, source, basis, jobs, overhead, ft, projected)


def status(r: CostResult) -> str | None:
    return "not_available" if r.price_per_hour_usd is None else None


def summary(r: CostResult) -> str:
    if r.price_per_hour_usd is None:
        return r.price_source
    host = ("; ".join(f"{m}: ${j['cost_usd']:.6f} per request" for m, j in r.generation.items())
            + f" at ${r.price_per_hour_usd:.2f}/h ({r.time_basis.split(':')[0]})")
    projected = (r.projected or {}).get("generation", {})
    if not projected:
        return host
    return host + "; projected: " + "; ".join(
        f"{m}: ${j['cost_per_million_tokens_usd']:.4f} per 1M generated tokens" for m, j in projected.items())


def html(data: dict) -> str:
    if not data.get("compile_overhead"):
        return ""
    out = [f'<p class="banner">{e(data.get("time_basis", ""))}. Price: '
           f'{num(data.get("price_per_hour_usd"), "${:.2f}/h")} ({e(data.get("price_source"))}).</p>']
    rows = [[e(mode), e(j["job"]), num(j["seconds"], "{:.4f}"), num(j["cost_usd"], "${:.8f}"),
             num(j["cost_per_million_tokens_usd"], "${:.4f}")] for mode, j in data.get("generation", {}).items()]
    if rows:
        out.append(table(["mode", "job", "seconds", "cost per job", "per 1M generated tokens"], rows))
    ft = data.get("finetune")
    if ft:
        out.append(table(["job", "seconds", "cost"], [[e(ft["job"]), num(ft["seconds"], "{:.3f}"),
                                                       num(ft["cost_usd"], "${:.8f}")]]))
    co = data["compile_overhead"]
    out.append(table(["compile overhead", "seconds", "cost"], [
        ["measured cold-call overhead (this run)", num(co.get("measured_cold_seconds"), "{:.2f}"),
         num(co.get("measured_cold_cost_usd"), "${:.8f}")],
        ["projected neuronx-cc time, this run's cache misses (fidelity estimate)",
         num(co.get("estimated_neuronx_cc_seconds"), "{:.1f}"), num(co.get("estimated_neuronx_cc_cost_usd"), "${:.8f}")],
        ["projected neuronx-cc time with an empty NEFF cache (upper bound)",
         num(co.get("estimated_empty_cache_seconds"), "{:.1f}"),
         num(co.get("estimated_empty_cache_cost_usd"), "${:.8f}")]]))
    out.append(_projected_html(data.get("projected")))
    return "".join(out)


def _projected_html(projected: dict | None) -> str:
    if not projected:
        return ""
    out = ["<h3>Projected on Trainium</h3>"]
    rows = [[e(mode), num(j["seconds"], "{:.6f}"), num(j["cost_usd"], "${:.10f}"),
             num(j["cost_per_million_tokens_usd"], "${:.4f}")] for mode, j in projected["generation"].items()]
    if rows:
        out.append(table(["mode", "projected seconds per request", "projected cost per request",
                          "projected per 1M generated tokens"], rows))
    t = projected.get("training_run")
    if t:
        out.append(table(["job", "projected run seconds", "projected first-run compile seconds",
                          "projected cost (run + compile)"],
                         [[e(t["job"]), num(t["seconds"], "{:.4f}"), num(t["compile_seconds"], "{:.1f}"),
                           num(t["total_cost_usd"], "${:.6f}")]]))
    return "".join(out)
