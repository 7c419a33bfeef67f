"""How far a model's outputs drift under the precisions a Trainium job would use.

The same inputs run through copies of the model on ``neuron``: in FP32 (as the real
product runs it, ``--auto-cast=none``), in bf16 rounding to nearest even (the default),
in bf16 with the runtime's stochastic rounding, and with every ``nn.Linear`` as an FP8
matmul (``fp8_linear.py``: ``torch._scaled_mm``, dynamic tensor-wise scales, as torchao's
float8 recipe) in the FP8 format the instance takes (``fp8.py``; e4m3 where it can). Each is compared with the FP32 model on
the host: the largest error relative to the largest reference value, the mean error, and
for logits the share of positions whose top-1 prediction is unchanged. These are **host
measurements of emulated numerics**: the rounding is the chip's, the kernels' summation
order is the host's.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Callable

import torch
from matplotlib.figure import Figure

from . import fp8_linear
from .rounding import stochastic_rounding

PRECISIONS = ("fp32", "bf16", "bf16-sr", "fp8")
_LABELS = {"fp32": "FP32", "bf16": "bf16, round to nearest even", "bf16-sr": "bf16, stochastic rounding",
           "fp8": "FP8 matmuls ({fmt}, tensor-wise scales), bf16 elsewhere"}


@dataclasses.dataclass(frozen=True)
class Drift:
    """One precision's outputs against the FP32 host reference."""

    precision: str
    description: str
    max_rel_error: float
    mean_abs_error: float
    top1_agreement: float | None  # logits only


def logits_of(model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The model's output tensor: ``.logits`` of a Transformers output, else the output itself."""
    out = model(inputs)
    return getattr(out, "logits", out)


def _compare(precision: str, description: str, got: list[torch.Tensor], ref: list[torch.Tensor]) -> Drift:
    got = [g.detach().float().cpu() for g in got]
    scale = max(r.abs().max().item() for r in ref) or 1.0
    errors = [(g - r).abs() for g, r in zip(got, ref)]
    top1 = None
    if all(r.dim() >= 2 and r.shape[-1] > 1 for r in ref):
        same = torch.cat([(g.argmax(-1) == r.argmax(-1)).flatten() for g, r in zip(got, ref)])
        top1 = same.float().mean().item()
    return Drift(precision, description, max(e.max().item() for e in errors) / scale,
                 torch.cat([e.flatten() for e in errors]).mean().item(), top1)


@torch.no_grad()
def measure(model: torch.nn.Module, batches: list[torch.Tensor], *, seed: int = 0,
            forward: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = logits_of,
            device: str = "neuron") -> list[Drift]:
    """Drift of ``forward(model, batch)`` per precision of :data:`PRECISIONS` against FP32 on the host,
    on the instance in force; ``model`` (on the host) is left as it was, and compared in FP32."""
    model = model.eval() if all(p.dtype == torch.float32 for p in model.parameters()) \
        else copy.deepcopy(model).float().eval()
    ref = [forward(model, b).detach().float() for b in batches]
    fmt = fp8_linear.formats()[0]
    rows = []
    for name in PRECISIONS:
        copy_ = copy.deepcopy(model).to(device)
        if name != "fp32":
            copy_ = copy_.to(torch.bfloat16)
        if name == "fp8":
            fp8_linear.with_fp8_matmuls(copy_)
        with stochastic_rounding(name == "bf16-sr", seed):
            got = [forward(copy_, b.to(device)) for b in batches]
        description = _LABELS[name].format(fmt=str(fmt).removeprefix("torch.float8_"))
        rows.append(_compare(name, description, got, ref))
    return rows


def table(rows: list[Drift]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the drift table, numbers formatted."""
    headers = ["precision", "max error ÷ largest FP32 output", "mean abs error", "top-1 unchanged"]
    body = [[r.description, f"{r.max_rel_error:.2e}", f"{r.mean_abs_error:.2e}",
             "n/a" if r.top1_agreement is None else f"{100 * r.top1_agreement:.1f} %"] for r in rows]
    return headers, body


def figure(rows: list[Drift]) -> Figure:
    """Bars of the relative error per precision (log scale): which setting moves the outputs how far."""
    fig = Figure(figsize=(6, 3.4))
    ax = fig.subplots()
    shown = [r for r in rows if r.precision != "fp32"]
    ax.bar([r.precision for r in shown], [max(r.max_rel_error, 1e-12) for r in shown], color="#d62728",
           label="max error / max |FP32|")
    ax.bar([r.precision for r in shown], [max(r.mean_abs_error, 1e-12) for r in shown], color="#1f77b4",
           width=0.4, label="mean |error|")
    ax.set_yscale("log")
    ax.set_ylabel("drift from FP32 (host)")
    ax.set_title("output drift per precision (emulated numerics)")
    ax.legend()
    return fig
