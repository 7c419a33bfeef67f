"""Step "Fine-tune loss curve vs CPU": the same short fine-tune on CPU and device copies, and the
kernels the device steps after the first would compile on Trainium (e.g. SGD with a changing
learning rate, whose rate the real product compiles by value)."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import time

import torch

from ...html_report.markup import e, img, table
from .. import perf
from ..config import Tolerance
from ..report import plots
from ..report.schema import Check

TITLE = "Fine-tune loss curve vs CPU"
LEARNING_RATE = 1e-3
TRAINING_SEED = 0


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
    # Kernel signatures first seen in device steps after the first (EMULATED count: each is a
    # compilation on Trainium with a cold NEFF cache); None when not counted (not neuron,
    # accounting off, a single step). One row per op and cause, with its remedy.
    steady_step_new_kernels: int | None = None
    steady_step_recompiles: list[dict] = dataclasses.field(default_factory=list)

    def to_data(self) -> dict:
        return dataclasses.asdict(self)


def make_optimizer(name: str, schedule: str, params, steps: int):
    """The optimizer and learning-rate scheduler (None for ``constant``) of ``--optimizer`` and
    ``--lr-schedule``; ``linear`` and ``cosine`` change the rate after every step."""
    opt = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[name](params, lr=LEARNING_RATE)
    if schedule == "linear":
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 - i / max(steps, 1))
    if schedule == "cosine":
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(steps, 1))
    return opt, None


def _train(model, ids: torch.Tensor, steps: int, sync, on_step, optimizer: str, schedule: str,
           recorder=None) -> tuple[list[float], list[float]]:
    with torch.random.fork_rng(devices=[]):
        # Both runs draw the same random numbers (dropout masks): random ops on neuron use the
        # CPU generator, as on the real product, so the same seed gives the same masks.
        torch.manual_seed(TRAINING_SEED)
        return _steps(model, ids, steps, sync, on_step, optimizer, schedule, recorder)


def _steps(model, ids: torch.Tensor, steps: int, sync, on_step, optimizer: str, schedule: str,
           recorder=None) -> tuple[list[float], list[float]]:
    model.train()
    opt, scheduler = make_optimizer(optimizer, schedule, model.parameters(), steps)
    losses, seconds = [], []
    for step in range(steps):
        if recorder is not None and step:
            recorder.next_iteration()
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()
        opt.zero_grad(set_to_none=True)
        value = loss.float().item()  # .item() waits for the device
        sync()
        seconds.append(time.perf_counter() - start)
        losses.append(value)
        on_step()
    return losses, seconds


def _recorder(device, steps: int):
    """Records new kernels per step on the neuron device with accounting on; else a no-op."""
    import torch_neuronx

    if device.type != "neuron" or steps < 2 or not torch_neuronx.kernel_accounting_enabled():
        return contextlib.nullcontext()
    from torch_neuronx.accounting.recompiles import RecompileRecorder

    return RecompileRecorder()


def run(ref_model, dev_model, rows: list[list[int]], steps: int, device, tol: Tolerance,
        sync, on_step, optimizer: str = "adamw", schedule: str = "constant") -> tuple[FinetuneResult, list[Check]]:
    """Loss curves compared step by step; device training throughput from the steps after the first;
    kernels the steps after the first compile (none on Trainium for a steady loop)."""
    ids = torch.tensor(rows)
    cpu_losses, _ = _train(copy.deepcopy(ref_model), ids, steps, lambda: None, on_step, optimizer, schedule)
    with _recorder(device, steps) as recorder:
        dev_losses, dev_seconds = _train(copy.deepcopy(dev_model), ids.to(device), steps, sync, on_step,
                                         optimizer, schedule, recorder)
    rel = max(abs(d - c) / max(abs(c), 1e-12) for d, c in zip(dev_losses, cpu_losses))
    steady = dev_seconds[1:] or dev_seconds
    name = {"adamw": "AdamW", "sgd": "SGD"}[optimizer]
    result = FinetuneResult(steps, len(rows), len(rows[0]), f"{name} lr={LEARNING_RATE:g}, {schedule} schedule",
                            cpu_losses, dev_losses, rel, dev_seconds, len(rows) * len(steady) / sum(steady))
    # The curves drift apart a little with every optimizer step, so allow the
    # loss tolerance to grow with the number of steps.
    limit = tol.loss_rtol * max(steps, 1)
    checks = [Check("fine-tune loss curve matches CPU", rel <= limit, rel, limit)]
    if recorder is not None:
        result.steady_step_recompiles = recorder.summary()
        result.steady_step_new_kernels = len(recorder.recompiles)
        checks.append(Check("fine-tune: steps after the first compile no new kernels (emulated count)",
                            not recorder.recompiles, len(recorder.recompiles), 0,
                            "; ".join(row["remedy"] for row in result.steady_step_recompiles)))
    return result, checks


def run_once(ctx) -> None:
    """The fine-tune (last but cost: it changes the weights), its training figures on the
    performance step, and on neuron its projected figures and timeline (``projected-trace.json``)."""
    cfg, device = ctx.cfg, ctx.device
    steps = cfg.train_steps
    if steps == 0:
        ctx.settle()
        return
    perf.reset_peak_memory(device)
    rows = ctx.known.batches[min(ctx.known.batches)]
    probe = perf.probe_for(device)
    measured = ctx.result("performance")
    with ctx.part(f" ({steps} steps, CPU then device)", total=2 * steps) as advance:
        mark = probe.mark() if probe else None
        result, checks = run(ctx.reference, ctx.model, rows, steps, device, cfg.tolerance, perf.synchronizer(device),
                             advance, cfg.optimizer, cfg.lr_schedule)
        if probe:
            _project(ctx, probe, mark, steps, len(rows))
        ctx.add_checks(checks)
        ctx.section.result = result
        measured.train_samples_per_second = result.train_samples_per_second
        measured.training_memory = perf.peak_memory(device)


def _project(ctx, probe, mark, steps: int, rows: int) -> None:
    """Projected fine-tune figures, where its device time goes, and its timeline as a trace."""
    from ...projection import get_projector, write_chrome_trace
    from ..output import PROJECTED_TRACE
    from .performance import project_training

    window = probe.since(mark)
    measured = ctx.result("performance")
    measured.projected_training = project_training(window, steps, rows, get_projector(), ctx.cfg.price_per_hour)
    measured.projection = {"label": "projected", "step": window.step.to_dict(),
                           "eager_by_engine": window.eager_by_engine, "eager": {"by_op": window.eager_by_op}}
    write_chrome_trace(get_projector(), probe.sequence(mark), ctx.workdir / PROJECTED_TRACE)


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
            + img(plots.loss_curves(data), "loss curves") + _recompiles_html(data))


def _recompiles_html(data: dict) -> str:
    new = data.get("steady_step_new_kernels")
    if new is None:
        return ""
    head = (f"<p><b>kernels compiled after the first step</b> (emulated count of what Trainium would "
            f"compile): {e(new)}</p>")
    rows = [[e(r["op"]), e(", ".join(r["static_arguments"]) or "new shapes/dtypes"), e(r["new_kernels"]),
             e(r["iterations"]), e(r["remedy"])] for r in data.get("steady_step_recompiles", [])]
    return head + (table(["op", "compiled by value", "new kernels", "steps", "remedy"], rows) if rows else "")
