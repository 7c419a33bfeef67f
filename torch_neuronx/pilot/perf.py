"""Latency, throughput and peak memory, measured the same way on any PyTorch device.

Decoding uses a static KV cache (``transformers.StaticCache``), the pattern the
real product recommends: every decode step then has the same shapes, so a
graph compiler (or Trainium's per-shape eager compilation) compiles one decode
step instead of one per cache length.

On the ``neuron`` device the same requests are also *projected* (the device
model of ``torch_neuronx.projection``): a ``probe`` (``accounting.projected``)
is read between the timed regions, never inside them.
"""
from __future__ import annotations


import torch

from ..testing.decoding import cache_argument, greedy_decode, host_peak_rss_bytes, reset_host_peak_rss


def synchronizer(device: torch.device):
    """A function that waits for queued work on ``device`` (nothing to wait for on CPU)."""
    if device.type == "cpu":
        return lambda: None
    return lambda: torch.accelerator.synchronize(device)


def percentiles(values: list[float]) -> dict:
    """p50/p95/p99 with linear interpolation, plus mean and count."""
    if not values:
        return {"count": 0, "p50": None, "p95": None, "p99": None, "mean": None}
    t = torch.tensor(values, dtype=torch.float64)
    q = torch.quantile(t, torch.tensor([0.5, 0.95, 0.99], dtype=torch.float64)).tolist()
    return {"count": len(values), "p50": q[0], "p95": q[1], "p99": q[2], "mean": t.mean().item()}


def probe_for(device: torch.device):
    """What projects the device's work (``accounting.projected``), or None: only the
    ``neuron`` device has a device model; elsewhere every figure is a host time."""
    if device.type != "neuron":
        return None
    from ..accounting import projected
    return projected


def decode_once(model, ids: torch.Tensor, gen_tokens: int, sync, probe=None):
    """One greedy request (the shared loop, ``testing.decoding``) into a new static cache: time
    to first token, the latency of each further token, the tokens, and with a ``probe`` the
    projection of the prefill and of each decode step."""
    from transformers import StaticCache

    cache = {cache_argument(model): StaticCache(config=model.config, max_cache_len=ids.shape[1] + gen_tokens)}
    projected, marks = [], []

    def read_window():
        projected.append(probe.since(marks[-1]))
        marks.append(probe.mark())

    sync()
    if probe:
        marks.append(probe.mark())
    run = greedy_decode(model, ids, gen_tokens, cache, ids.device, sync, after_token=read_window if probe else None)
    return run.ttft_seconds, run.per_token_seconds, run.tokens.tolist(), projected


def greedy_static(model, ids: torch.Tensor, new_tokens: int, pad_token_id: int) -> list[list[int]]:
    """Greedy tokens from the timed decode loop: in compile mode it reuses the graphs that
    the performance step runs, instead of compiling ``generate``'s own call signature too."""
    return decode_once(model, ids, new_tokens, synchronizer(ids.device))[2]


def _projected(steady: list, batch: int, length: int) -> dict:
    """Projected TTFT, per-token latency, whole-request seconds (the sum of its windows, what
    the cost step prices), throughputs and MFU of the steady-state requests."""
    from ..projection import LABEL, get_projector

    ttft = [r[3][0].step.seconds for r in steady]
    tokens = [w.step.seconds for r in steady for w in r[3][1:]]
    requests = [sum(w.step.seconds for w in r[3]) for r in steady]
    flops = sum(w.step.flops for r in steady for w in r[3])
    return {"label": LABEL, "ttft_seconds": percentiles(ttft), "per_token_seconds": percentiles(tokens),
            "request_seconds": percentiles(requests),
            "prefill_tokens_per_second": batch * length * len(ttft) / sum(ttft) if sum(ttft) else None,
            "decode_tokens_per_second": batch * len(tokens) / sum(tokens) if sum(tokens) else None,
            "flops": flops, "mfu": get_projector().mfu(flops, sum(requests))}


def measure_generation(model, batches: dict, gen_tokens: int, iters: int, device, on_iter) -> dict:
    """Per sequence length: the cold first request, then ``iters - 1`` steady-state requests
    (host times; on ``neuron`` also their projection, under ``projected``)."""
    sync = synchronizer(device)
    probe = probe_for(device)
    shapes, all_ttft, all_token, all_steady = {}, [], [], []
    for length, rows in sorted(batches.items()):
        ids = torch.tensor(rows, device=device)
        runs = []
        for _ in range(iters):
            runs.append(decode_once(model, ids, gen_tokens, sync, probe))
            on_iter()
        (cold_ttft, cold_tokens, _, _), steady = runs[0], runs[1:]
        ttft = [r[0] for r in steady]
        tokens = [t for r in steady for t in r[1]]
        decode_seconds = [sum(r[1]) for r in steady]
        batch = ids.shape[0]
        shapes[str(length)] = {
            "batch_size": batch,
            "cold_ttft_seconds": cold_ttft,
            "cold_decode_seconds": sum(cold_tokens),
            "ttft_seconds": percentiles(ttft),
            "per_token_seconds": percentiles(tokens),
            "prefill_tokens_per_second": batch * length / (sum(ttft) / len(ttft)),
            "decode_tokens_per_second": (batch * (gen_tokens - 1) * len(steady) / sum(decode_seconds))
            if sum(decode_seconds) > 0 else None,
            "ttft_samples": ttft,
            "per_token_samples": tokens,
        }
        if probe and steady:
            shapes[str(length)]["projected"] = _projected(steady, batch, length)
        all_ttft += ttft
        all_token += tokens
        all_steady += steady
    data = {"label": "host", "gen_tokens": gen_tokens, "iters": iters, "shapes": shapes,
            "ttft_seconds": percentiles(all_ttft), "per_token_seconds": percentiles(all_token)}
    projected = [s["projected"] for s in shapes.values() if "projected" in s]
    if projected:
        data["projected"] = {"label": projected[0]["label"], "ttft_seconds": percentiles(
            [r[3][0].step.seconds for r in all_steady]), "per_token_seconds": percentiles(
            [w.step.seconds for r in all_steady for w in r[3][1:]])}
    return data


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cpu":
        reset_host_peak_rss()
    else:
        torch.accelerator.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict:
    """Peak bytes of tensors on the core and of the segments its allocator reserved (what must
    fit), vs its capacity; on CPU only the process's peak RSS exists."""
    if device.type == "cpu":
        return {"scope": "host process (peak RSS)", "peak_bytes": host_peak_rss_bytes(), "capacity_bytes": None,
                "peak_reserved_bytes": None, "peak_fraction": None}
    peak = torch.accelerator.max_memory_allocated(device)
    _free, total = torch.accelerator.get_memory_info(device)
    return {"scope": f"{device} (per core)", "peak_bytes": peak, "capacity_bytes": total,
            "peak_reserved_bytes": torch.accelerator.max_memory_reserved(device),
            "peak_fraction": peak / total if total else None}
