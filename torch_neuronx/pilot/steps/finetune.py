"""Step "Fine-tune loss curve vs CPU": the same short AdamW fine-tune on CPU and device copies."""
from __future__ import annotations

import copy
import dataclasses
import time

import torch

from ..config import Tolerance
from ..report import plots
from ..report.markup import e, img
from ..report.schema import Check

TITLE = "Fine-tune loss curve vs CPU"


@dataclasses.dataclass
class FinetuneResult:
    steps: int
    batch_size: int
    seq_len: int
    optimizer: str
    cpu_loss: list[float]
    device_loss: list[float]
    max_relative_difference: float
    device_step_seconds: list[float]
    train_samples_per_second: float

    def to_data(self) -> dict:
        return dataclasses.asdict(self)


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


def run(ref_model, dev_model, rows: list[list[int]], steps: int, device, tol: Tolerance,
        sync, on_step) -> tuple[FinetuneResult, list[Check]]:
    """Loss curves compared step by step; device training throughput from the steps after the first."""
    ids = torch.tensor(rows)
    cpu_losses, _ = _train(copy.deepcopy(ref_model), ids, steps, lambda: None, on_step)
    dev_losses, dev_seconds = _train(copy.deepcopy(dev_model), ids.to(device), steps, sync, on_step)
    rel = max(abs(d - c) / max(abs(c), 1e-12) for d, c in zip(dev_losses, cpu_losses))
    steady = dev_seconds[1:] or dev_seconds
    result = FinetuneResult(steps, len(rows), len(rows[0]), "AdamW lr=1e-3", cpu_losses, dev_losses, rel,
                            dev_seconds, len(rows) * len(steady) / sum(steady))
    # The curves drift apart a little with every optimizer step, so allow the
    # loss tolerance to grow with the number of steps.
    limit = tol.loss_rtol * max(steps, 1)
    return result, [Check("fine-tune loss curve matches CPU", rel <= limit, rel, limit)]


def status(r: FinetuneResult | None) -> str | None:
    return "skipped" if r is None else None


def summary(r: FinetuneResult | None) -> str:
    if r is None:
        return "skipped (--train-steps 0)"
    return (f"{r.steps} steps, final loss {r.device_loss[-1]:.4f} (CPU {r.cpu_loss[-1]:.4f}), "
            f"{r.train_samples_per_second:.1f} samples/s")


def html(data: dict) -> str:
    if not data.get("steps"):
        return ""
    return (f"<p>{e(data['steps'])} steps of {e(data['optimizer'])}, batch {e(data['batch_size'])} × "
            f"{e(data['seq_len'])} tokens; {data['train_samples_per_second']:.2f} samples/s on the device.</p>"
            + img(plots.loss_curves(data), "loss curves"))
