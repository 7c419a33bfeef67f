"""The checks of one architecture: forward, backward, generate (dynamic and static cache), save/load.

Each check runs on the CPU first; the CPU's results are the reference the
device must match (logits and gradients within tolerance, identical greedy
tokens, identical logits after a save/load round trip). A check that fails on
the CPU as well is a limitation of the architecture or of this tiny build, not
of the device, and is reported as such.
"""
from __future__ import annotations

import copy
import tempfile
import time

import torch

from ..runtime.errors import first_line
from ..testing.tiny_models import TinySize, tiny_causal_lm

CHECKS = ("forward", "backward", "generate_dynamic", "generate_static", "save_load")
ATOL, RTOL = 1e-4, 1e-3
NEW_TOKENS = 4


def _close(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, float]:
    a, b = a.detach().to("cpu", torch.float32), b.detach().to("cpu", torch.float32)
    err = (a - b).abs().max().item() if a.numel() else 0.0
    return bool(torch.allclose(a, b, atol=ATOL, rtol=RTOL, equal_nan=False)), err


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def gradients(model, ids, call=None) -> dict[str, torch.Tensor]:
    """``model``'s gradients of the loss of ``call`` (default the model itself; a compiled wrapper
    names its parameters ``_orig_mod.…``, so they are read from the model)."""
    # Gradients in eval mode: dropout would make CPU and device draw different masks.
    try:
        loss = (model if call is None else call)(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
        loss.backward()
        return {n: p.grad.detach().to("cpu") for n, p in model.named_parameters() if p.grad is not None}
    finally:
        model.zero_grad(set_to_none=True)


def greedy_tokens(model, ids, static: bool, auto_compile: bool = False) -> list[list[int]]:
    """Greedy tokens; with a static cache Transformers compiles the forward itself on a device it
    compiles for (``neuron`` among them) unless ``auto_compile`` is False."""
    extra = {"cache_implementation": "static", "disable_compile": not auto_compile} if static else {}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, **extra)
    return out[:, ids.shape[1]:].tolist()


def _save_load(model, ids, device) -> torch.Tensor:
    before = logits_of(model, ids)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        reloaded = type(model).from_pretrained(tmp, dtype=torch.float32).eval().to(device)
    after = logits_of(reloaded, ids)
    ok, err = _close(after, before)
    if not ok:
        raise AssertionError(f"logits changed after save/load by {err:.3g}")
    return after


def _run_checks(model, ids, device, reference: dict | None) -> tuple[dict, dict]:
    """Run every check on ``device``; compare with ``reference`` outputs when given."""
    results, outputs = {}, {}
    steps = {
        "forward": lambda: logits_of(model, ids),
        "backward": lambda: gradients(model, ids),
        "generate_dynamic": lambda: greedy_tokens(model, ids, static=False),
        "generate_static": lambda: greedy_tokens(model, ids, static=True),
        "save_load": lambda: _save_load(model, ids, device),
    }
    for name in CHECKS:
        start = time.perf_counter()
        try:
            out = steps[name]()
            outputs[name] = out
            detail = differs_from_cpu(name, out, reference.get(name)) if reference is not None else None
            results[name] = {"ok": detail is None, "error": detail}
        except Exception as exc:  # every failure is data for the table
            results[name] = {"ok": False, "error": first_line(exc, limit=300)}
        results[name]["seconds"] = round(time.perf_counter() - start, 3)
    return results, outputs


def differs_from_cpu(name: str, out, ref) -> str | None:
    """None when the device output matches the CPU's, else what differs."""
    if ref is None:
        return None  # the CPU could not produce it: nothing to compare against
    if name in ("forward", "save_load"):
        ok, err = _close(out, ref)
        return None if ok else f"logits differ from CPU by {err:.3g}"
    if name == "backward":
        worst = max(((k, _close(out[k], g)) for k, g in ref.items() if k in out), key=lambda kv: kv[1][1],
                    default=None)
        missing = set(ref) - set(out)
        if missing:
            return f"{len(missing)} parameters got no gradient on the device"
        if worst and not worst[1][0]:
            return f"gradient of {worst[0]} differs from CPU by {worst[1][1]:.3g}"
        return None
    if out != ref:
        return f"greedy tokens differ from CPU: {out} vs {ref}"
    return None


def _lowering_check(report: dict) -> dict:
    """The "lowers" column: every eager kernel the device checks ran lowers to StableHLO
    (``ok`` None when torch-mlir is absent and nothing was checked)."""
    if not report["checked"]:
        return {"ok": None, "error": "not checked (torch-mlir is not installed)", "ops_not_lowered": []}
    missing = report["would_fall_back_to_cpu"]
    error = "; ".join(f"{op}: {why}" for op, why in missing.items()) or None
    return {"ok": not missing, "error": error, "ops_not_lowered": sorted(missing),
            "signatures": report["signatures"], "stablehlo_ops": sum(report["stablehlo_ops_per_op"].values())}


def _device_checks(model, ids, device, reference: dict, lower: bool) -> tuple[dict, dict | None]:
    """The checks on ``device``; with ``lower``, every kernel they run is lowered as the real product would
    (the eager opt-in of compile/kernel_lowering.py, restarted so this architecture's kernels are all seen)."""
    if not lower or device.type == "cpu":
        return _run_checks(model, ids, device, reference)[0], None
    import torch_neuronx
    from ..compile import kernel_lowering

    was_on = kernel_lowering.eager_lowering_active()
    torch_neuronx.reset_metrics()  # forget seen signatures: this architecture's are all reported
    kernel_lowering.set_eager_lowering(True)
    try:
        results = _run_checks(model, ids, device, reference)[0]
    finally:
        kernel_lowering.set_eager_lowering(was_on)
    return results, _lowering_check(kernel_lowering.eager_lowering_report())


def token_batch(model) -> torch.Tensor:
    """The seeded 2 × 8 batch of token ids inside ``model``'s vocabulary that every check feeds."""
    head = model.get_output_embeddings()
    # MusicGen has one head per codebook (a ModuleList without a weight): the config's vocabulary.
    weight = getattr(head, "weight", None)
    vocab = weight.shape[0] if isinstance(weight, torch.Tensor) else model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    return torch.randint(3, max(vocab, 4), (2, 8), generator=generator)


def probe(model_type: str, device: str, on_phase=lambda phase: None, lower: bool = True,
          size: TinySize = TinySize()) -> dict:
    """All checks of one architecture, built tiny at ``size``, on the CPU and on ``device``; JSON-ready."""
    result = {"model_type": model_type, "device": device}
    on_phase("build")
    try:
        model = tiny_causal_lm(model_type, size)
        result["architecture"] = type(model).__name__
        result["parameters"] = sum(p.numel() for p in model.parameters())
    except Exception as exc:
        result.update(status="build_failed", error=first_line(exc, limit=300))
        return result
    ids = token_batch(model)
    on_phase("cpu")
    cpu_results, cpu_outputs = _run_checks(model, ids, torch.device("cpu"), None)
    on_phase("device")
    target = torch.device(device)
    try:
        dev_model = copy.deepcopy(model).to(target)
        dev_results, lowering = _device_checks(dev_model, ids.to(target), target, cpu_outputs, lower)
    except Exception as exc:
        dev_results, lowering = {name: {"ok": False, "error": f"moving the model: {first_line(exc, limit=300)}"}
                                 for name in CHECKS}, None
    result["cpu"], result["device_checks"] = cpu_results, dev_results
    if lowering is not None:
        result["lowers"] = lowering
    result["status"] = classify(cpu_results, dev_results)
    return result


def classify(cpu: dict, dev: dict) -> str:
    """pass | device_fail (a check passes on CPU, not on the device) | cpu_fail (fails on CPU too)."""
    if any(cpu[c]["ok"] and not dev[c]["ok"] for c in CHECKS):
        return "device_fail"
    if all(cpu[c]["ok"] for c in CHECKS):
        return "pass"
    return "cpu_fail"
