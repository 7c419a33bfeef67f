"""Step "Checkpoint round trip (fresh process)": save on the device, reload in a new interpreter."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from ...html_report.markup import e, num, table
from .. import fresh_process
from ..report.schema import Check

TITLE = "Checkpoint round trip (fresh process)"
WORKER_TIMEOUT_SECONDS = 1800


@dataclasses.dataclass
class CheckpointResult:
    save_seconds: float
    directory: str
    load_seconds: float
    max_abs_difference: float
    compared: str

    def to_data(self) -> dict:
        return dataclasses.asdict(self)


def run(dev_model, device, cfg, known, modes: list[str], workdir: Path) -> tuple[CheckpointResult, list[Check], dict]:
    """The result, its check, and the fresh process's first-call timings per mode (for the compilation step)."""
    ckpt = workdir / "checkpoint"
    start = time.perf_counter()
    dev_model.save_pretrained(ckpt)
    save_seconds = time.perf_counter() - start
    logits_path = workdir / "reloaded_logits.pt"
    request = {"checkpoint": str(ckpt), "device": str(device), "dtype": cfg.dtype,
               "attn": cfg.attn_implementation, "hbm_per_core_gib": cfg.hbm_per_core_gib,
               "batches": {str(k): v for k, v in known.batches.items()}, "modes": modes,
               "logits_out": str(logits_path)}
    answer = fresh_process.run_in_child(request, WORKER_TIMEOUT_SECONDS)
    first = min(known.batches)
    with torch.no_grad():
        expected = dev_model(input_ids=torch.tensor(known.batches[first], device=device),
                             use_cache=False).logits.to("cpu")
    reloaded = torch.load(logits_path)
    logits_path.unlink()
    diff = (reloaded.float() - expected.float()).abs().max().item()
    result = CheckpointResult(save_seconds, ckpt.name, answer["load_seconds"], diff,
                              f"logits of the seq={first} batch")
    check = Check("reloaded checkpoint gives identical logits", diff == 0.0, diff, 0.0,
                  "save_pretrained on the device, from_pretrained on the device in a new process")
    return result, [check], answer["modes"]


def run_once(ctx) -> None:
    """Save on the device, reload in a fresh process; its first calls go to the compilation step."""
    with ctx.part(" (save + reload in a fresh process)"):
        result, checks, fresh = run(ctx.model, ctx.device, ctx.cfg, ctx.known, list(ctx.modes), ctx.workdir)
        ctx.add_checks(checks)
        ctx.section.result = result
        ctx.result("compilation").fresh_process = fresh


def summary(r: CheckpointResult) -> str:
    return f"reloaded in a fresh process: max |Δ logits| = {r.max_abs_difference}"


def html(data: dict) -> str:
    if not data:
        return ""
    return table(["", ""], [[e(k), num(v)] for k, v in data.items() if k != "errors"])
