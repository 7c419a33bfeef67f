"""Cost per completed job: measured seconds × the instance's price per hour.

On the emulated device the seconds are host-CPU time, not Trainium time, and
the report says so next to every figure; the method (what a "job" is) is the
same on real hardware. The projected compile overhead uses the fidelity
layer's *estimated* neuronx-cc seconds, since the emulator's compile is not
Trainium's compiler.
"""
from __future__ import annotations


def price_for(device_type: str, user_price: float | None, profile) -> tuple[float | None, str]:
    """The hourly price to use and where it comes from."""
    if user_price is not None:
        return user_price, "--price-per-hour"
    if device_type != "neuron":
        return None, f"no price for a {device_type} machine; pass --price-per-hour"
    if profile.price_per_hour is None:
        return None, f"no published price for {profile.name}; pass --price-per-hour"
    return profile.price_per_hour, f"{profile.name} profile: {profile.price_source}"


def time_basis(device_type: str, emulated: bool) -> str:
    if emulated:
        return ("emulated-host time: measured on the host CPU that emulates the NeuronCore, "
                "not Trainium execution time")
    return f"measured on {device_type}"


def job_costs(price: float | None, gen_tokens: int, generation: dict, finetune: dict | None,
              compile_estimate_seconds: float | None, cold_overhead_seconds: float | None,
              empty_cache_estimate_seconds: float | None = None) -> dict:
    """Per mode: one generation request of the largest known shape; the fine-tune; compile overhead."""
    per_hour = (lambda s: s * price / 3600) if price is not None else (lambda s: None)
    jobs = {}
    for mode, perf in generation.items():
        longest = max(perf["shapes"], key=int)
        shape = perf["shapes"][longest]
        seconds = shape["ttft_seconds"]["p50"] + (gen_tokens - 1) * (shape["per_token_seconds"]["p50"] or 0.0)
        tokens = shape["batch_size"] * gen_tokens
        cost = per_hour(seconds)
        jobs[mode] = {
            "job": f"one greedy request: batch {shape['batch_size']} × {longest} prompt tokens, "
                   f"{gen_tokens} new tokens each (p50 latencies)",
            "seconds": seconds,
            "generated_tokens": tokens,
            "cost_usd": cost,
            "cost_per_million_tokens_usd": cost * 1e6 / tokens if cost is not None else None,
        }
    data = {"generation": jobs}
    if finetune:
        steps = finetune["device_step_seconds"]
        seconds = sum(steps)
        data["finetune"] = {"job": f"{len(steps)} fine-tune steps", "seconds": seconds, "cost_usd": per_hour(seconds)}
    data["compile_overhead"] = {
        "measured_cold_seconds": cold_overhead_seconds,
        "measured_cold_cost_usd": per_hour(cold_overhead_seconds) if cold_overhead_seconds is not None else None,
        "estimated_neuronx_cc_seconds": compile_estimate_seconds,
        "estimated_neuronx_cc_cost_usd": per_hour(compile_estimate_seconds)
        if compile_estimate_seconds is not None else None,
        # what a first run with an empty NEFF cache would pay: every kernel signature of the
        # cold calls compiled (an upper bound: a signature shared by two shapes counts twice)
        "estimated_empty_cache_seconds": empty_cache_estimate_seconds,
        "estimated_empty_cache_cost_usd": per_hour(empty_cache_estimate_seconds)
        if empty_cache_estimate_seconds is not None else None,
    }
    return data
