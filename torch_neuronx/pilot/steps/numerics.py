"""Step "Numerical behaviour vs CPU": logits (and per-layer outputs) on every known batch."""
from __future__ import annotations

import dataclasses

import torch

from ...html_report.markup import badge, e, img, num, table
from ..config import Tolerance
from ..report import plots
from ..report.schema import Check

TITLE = "Numerical behaviour vs CPU"


@dataclasses.dataclass
class NumericsResult:
    # mode -> {"logits": {seq_len: error}, "per_layer_max_abs_error": [...] | None, "tolerance": {atol, rtol}}
    modes: dict[str, dict] = dataclasses.field(default_factory=dict)

    def to_data(self) -> dict:
        return dict(self.modes)


RESULT = NumericsResult  # made empty before the first mode: a step no mode reached says so


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


def run(result: NumericsResult, mode: str, ref_model, dev_model, batches: dict, device: torch.device,
        tol: Tolerance, hooks: bool) -> list[Check]:
    """Logits on every known batch, device vs CPU, into ``result.modes[mode]``."""
    per_shape, layer_errors, checks = {}, None, []
    for length, rows in sorted(batches.items()):
        ids = torch.tensor(rows)
        ref_logits, ref_layers = forward_with_layer_outputs(ref_model, ids, hooks)
        dev_logits, dev_layers = forward_with_layer_outputs(dev_model, ids.to(device), hooks)
        err = tensor_error(dev_logits, ref_logits, tol)
        per_shape[str(length)] = err
        checks.append(Check(f"{mode} logits seq={length}", err["within_tolerance"], err["max_abs_error"], tol.atol,
                            f"max rel {err['max_rel_error']:.2e}, rtol {tol.rtol}"))
        if layer_errors is None and ref_layers and len(ref_layers) == len(dev_layers):
            layer_errors = [tensor_error(d, r, tol)["max_abs_error"] for d, r in zip(dev_layers, ref_layers)]
    result.modes[mode] = {"logits": per_shape, "per_layer_max_abs_error": layer_errors,
                          "tolerance": {"atol": tol.atol, "rtol": tol.rtol}}
    return checks


def run_mode(ctx, mode: str) -> None:
    with ctx.part(f" ({mode})"):
        ctx.add_checks(run(ctx.section.result, mode, ctx.reference, ctx.model, ctx.known.batches, ctx.device,
                           ctx.cfg.tolerance, hooks=ctx.cfg.hidden_states and mode == "eager"))


def _worst(r: NumericsResult) -> float | None:
    return max((e["max_abs_error"] for m in r.modes.values() for e in m.get("logits", {}).values()), default=None)


def status(r: NumericsResult) -> str | None:
    return "not_available" if _worst(r) is None else None


def summary(r: NumericsResult) -> str:
    worst = _worst(r)
    if worst is None:
        return "no mode ran"
    atol = next(iter(r.modes.values()))["tolerance"]["atol"]
    return f"max |logits error| {worst:.2e} vs CPU (atol {atol})"


def html(data: dict) -> str:
    rows = [[e(mode), e(length), num(err["max_abs_error"]), num(err["max_rel_error"]), num(err["mean_abs_error"]),
             badge("passed" if err["within_tolerance"] else "failed")]
            for mode, d in data.items() if isinstance(d, dict) and "logits" in d for length, err in d["logits"].items()]
    out = table(["mode", "seq len", "max abs error", "max rel error", "mean abs error", "tolerance"], rows) if rows else ""
    layers = data.get("eager", {}).get("per_layer_max_abs_error")
    return out + img(plots.layer_errors(layers), "error per layer")
