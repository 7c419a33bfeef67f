"""Numerics, output quality and fine-tune: the device against the CPU reference.

Every function takes the CPU reference model and the device model (same
weights) and returns plain JSON-ready data plus named checks; the runner
decides how they roll up into step status and exit code.
"""
from __future__ import annotations

import copy
import math
import time

import torch

from .config import Tolerance


def check(name: str, passed: bool, value, limit, detail: str = "") -> dict:
    return {"name": name, "passed": bool(passed), "value": value, "limit": limit, "detail": detail}


def tensor_error(device_t: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> dict:
    """Max abs error, max error relative to the largest reference value, allclose verdict."""
    d = device_t.detach().to("cpu", torch.float32)
    r = ref.detach().to(torch.float32)
    diff = (d - r).abs()
    scale = r.abs().max().item() or 1.0
    finite = bool(torch.isfinite(d).all())
    return {
        "max_abs_error": diff.max().item(),
        "max_rel_error": diff.max().item() / scale,
        "mean_abs_error": diff.mean().item(),
        "finite": finite,
        "within_tolerance": finite and bool((diff <= tol.atol + tol.rtol * r.abs()).all()),
    }


def _decoder_layers(model) -> torch.nn.ModuleList | None:
    """The list of transformer blocks: the ModuleList as long as ``num_hidden_layers``."""
    n = getattr(model.config, "num_hidden_layers", None)
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    return lists[0] if lists else None


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


@torch.no_grad()
def forward_with_layer_outputs(model, ids: torch.Tensor, hooks: bool):
    """Logits, and (if ``hooks``) each decoder block's output captured by forward hooks."""
    captured: list[torch.Tensor] = []
    handles = []
    layers = _decoder_layers(model) if hooks else None
    if layers is not None:
        for layer in layers:
            handles.append(layer.register_forward_hook(
                lambda _m, _i, out: captured.append(_first_tensor(out).detach().to("cpu"))
            ))
    try:
        logits = model(input_ids=ids, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    return logits, captured


def numerics(ref_model, dev_model, batches: dict, device: torch.device, tol: Tolerance,
             hooks: bool, label: str) -> tuple[dict, list[dict]]:
    """Logits (and per-layer outputs) on every known batch, device vs CPU."""
    per_shape, layer_errors, checks = {}, None, []
    for length, rows in sorted(batches.items()):
        ids = torch.tensor(rows)
        ref_logits, ref_layers = forward_with_layer_outputs(ref_model, ids, hooks)
        dev_logits, dev_layers = forward_with_layer_outputs(dev_model, ids.to(device), hooks)
        err = tensor_error(dev_logits, ref_logits, tol)
        per_shape[str(length)] = err
        checks.append(check(f"{label} logits seq={length}", err["within_tolerance"],
                            err["max_abs_error"], tol.atol,
                            f"max rel {err['max_rel_error']:.2e}, rtol {tol.rtol}"))
        if layer_errors is None and ref_layers and len(ref_layers) == len(dev_layers):
            layer_errors = [tensor_error(d, r, tol)["max_abs_error"] for d, r in zip(dev_layers, ref_layers)]
    data = {"logits": per_shape, "per_layer_max_abs_error": layer_errors,
            "tolerance": {"atol": tol.atol, "rtol": tol.rtol}}
    return data, checks


@torch.no_grad()
def greedy_tokens(model, ids: torch.Tensor, new_tokens: int, pad_token_id: int) -> list[list[int]]:
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad_token_id,
        # A static KV cache keeps decode shapes fixed (one compilation, not one per
        # length); our own torch.compile wraps forward in compile mode, so
        # Transformers must not compile on its own.
        cache_implementation="static", disable_compile=True,
    )
    return out[:, ids.shape[1]:].tolist()


def generation(ref_model, dev_model, rows: list[list[int]], new_tokens: int, device, tol: Tolerance,
               tokenizer, label: str, greedy=greedy_tokens) -> tuple[dict, list[dict]]:
    """Greedy generations (``greedy(model, ids, n, pad)``) compared token by token, first divergence per row."""
    ids = torch.tensor(rows)
    pad = getattr(ref_model.generation_config, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else 0
    ref = greedy(ref_model, ids, new_tokens, pad)
    dev = greedy(dev_model, ids.to(device), new_tokens, pad)
    matches = sum(a == b for r, d in zip(ref, dev) for a, b in zip(r, d))
    total = sum(len(r) for r in ref)
    first_divergence = [next((i for i, (a, b) in enumerate(zip(r, d)) if a != b), None)
                        for r, d in zip(ref, dev)]
    agreement = matches / total if total else 1.0
    data = {
        "method": getattr(greedy, "__name__", str(greedy)),
        "cpu_tokens": ref, "device_tokens": dev, "token_agreement": agreement,
        "first_divergence": first_divergence,
        "cpu_text": [tokenizer.decode(r) for r in ref],
        "device_text": [tokenizer.decode(d) for d in dev],
    }
    return data, [check(f"{label} greedy tokens match CPU", agreement >= tol.min_token_agreement,
                        agreement, tol.min_token_agreement)]


@torch.no_grad()
def perplexity(ref_model, dev_model, eval_ids: list[int], device, tol: Tolerance,
               label: str) -> tuple[dict, list[dict]]:
    ids = torch.tensor([eval_ids])
    ref_loss = ref_model(input_ids=ids, labels=ids).loss.float().item()
    dev_ids = ids.to(device)
    dev_loss = dev_model(input_ids=dev_ids, labels=dev_ids).loss.float().item()
    rel = abs(dev_loss - ref_loss) / max(abs(ref_loss), 1e-12)
    data = {"tokens": len(eval_ids), "cpu_loss": ref_loss, "device_loss": dev_loss,
            "cpu_perplexity": _safe_exp(ref_loss), "device_perplexity": _safe_exp(dev_loss),
            "relative_difference": rel}
    return data, [check(f"{label} loss on built-in text matches CPU", rel <= tol.loss_rtol, rel, tol.loss_rtol)]


def _safe_exp(x: float) -> float | None:
    return math.exp(x) if x < 700 else None


def _train(model, ids: torch.Tensor, steps: int, sync, on_step) -> tuple[list[float], list[float]]:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, seconds = [], []
    for _ in range(steps):
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.float().item()  # .item() waits for the device
        sync()
        seconds.append(time.perf_counter() - start)
        losses.append(value)
        on_step()
    return losses, seconds


def finetune(ref_model, dev_model, rows: list[list[int]], steps: int, device, tol: Tolerance,
             sync, on_step) -> tuple[dict, list[dict]]:
    """The same short AdamW fine-tune on CPU and device copies; loss curves compared step by step."""
    ids = torch.tensor(rows)
    cpu_losses, _ = _train(copy.deepcopy(ref_model), ids, steps, lambda: None, on_step)
    dev_losses, dev_seconds = _train(copy.deepcopy(dev_model), ids.to(device), steps, sync, on_step)
    rel = max(abs(d - c) / max(abs(c), 1e-12) for d, c in zip(dev_losses, cpu_losses))
    steady = dev_seconds[1:] or dev_seconds
    data = {
        "steps": steps, "batch_size": len(rows), "seq_len": len(rows[0]), "optimizer": "AdamW lr=1e-3",
        "cpu_loss": cpu_losses, "device_loss": dev_losses, "max_relative_difference": rel,
        "device_step_seconds": dev_seconds,
        "train_samples_per_second": len(rows) * len(steady) / sum(steady),
    }
    # The curves drift apart a little with every optimizer step, so allow the
    # loss tolerance to grow with the number of steps.
    limit = tol.loss_rtol * max(steps, 1)
    return data, [check("fine-tune loss curve matches CPU", rel <= limit, rel, limit)]
