"""The one timed greedy-decoding loop and the one host peak-memory reading, shared by the
pilot's performance step and the benchmarks' ``generate`` and ``train`` workloads.

It needs only ``torch`` (and a model's static KV cache from ``transformers``), so the
benchmarks load it by path in their PyTorch/XLA interpreter too, where this package's
C++ extension (built for the project's torch) cannot be imported.
"""
from __future__ import annotations

import dataclasses
import inspect
import time

import torch


@dataclasses.dataclass
class Decoded:
    """One greedy request: host seconds to the first token and for each further token."""

    ttft_seconds: float
    per_token_seconds: list[float]
    tokens: torch.Tensor  # (batch, new tokens), on the model's device


def cache_argument(model) -> str:
    """The name of the model's key/value cache, as its ``forward`` argument and output field:
    Transformers 5.x renamed ``past_key_values`` to ``cache`` (the old name warns); older classes
    keep the old name."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


@torch.no_grad()
def greedy_decode(forward, prompt: torch.Tensor, new_tokens: int, cache_kwargs: dict, device, sync,
                  positions: bool = True, after_token=None) -> Decoded:
    """Decode ``new_tokens`` greedily into a prepared static cache (``cache_kwargs``: the model's
    cache argument). The first timed region copies ``prompt`` to ``device`` and runs the prefill;
    each further region one decode step; each ends with ``sync()`` (the device's queue drained).
    ``positions`` passes ``cache_position`` explicitly (fixed-shape decode steps for graph
    compilers); ``after_token()`` runs after each timed region, outside it (the pilot reads its
    projection there)."""
    start = time.perf_counter()
    ids = prompt.to(device)
    length = ids.shape[1]
    times, tokens = [], []
    for step in range(new_tokens):
        where = {}
        if positions:
            where["cache_position"] = (torch.arange(length, device=device) if step == 0
                                       else torch.tensor([length + step - 1], device=device))
        ids = forward(input_ids=ids, **cache_kwargs, use_cache=True, **where).logits[:, -1:].argmax(-1)
        sync()
        times.append(time.perf_counter() - start)
        tokens.append(ids)
        if after_token is not None:
            after_token()
        start = time.perf_counter()
    return Decoded(times[0], times[1:], torch.cat(tokens, dim=1))


def host_peak_rss_bytes() -> int:
    """Peak resident set size of this process since the last :func:`reset_host_peak_rss` (Linux VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM missing from /proc/self/status")


def reset_host_peak_rss() -> None:
    """Restart the peak at the current RSS, so it reflects what runs next, not the imports."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
