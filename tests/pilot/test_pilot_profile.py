"""The pilot's profile step: one steady training step of a tiny model profiled on the emulated
device, as the report holds it (JSON figures, both pictures in report.html), and a profiling
failure kept to that step."""
from __future__ import annotations

import io
import json

import pytest
import torch
from rich.console import Console

from torch_neuronx.pilot import PilotConfig
from torch_neuronx.pilot.console import PilotConsole
from torch_neuronx.pilot.context import PilotContext
from torch_neuronx.pilot.recorder import ReportRecorder
from torch_neuronx.pilot.steps import finetune, profile
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

SIZE = TinySize(hidden=32, intermediate=64, heads=2, kv_heads=1, layers=1, vocab=64)


def _context(tmp_path, device: str, trained=None) -> PilotContext:
    cfg = PilotConfig(out=tmp_path, device=device)
    ui = PilotConsole(Console(file=io.StringIO(), width=120))
    ctx = PilotContext(cfg, ui, ReportRecorder(cfg, ui, tmp_path), device=torch.device(device), trained=trained)
    ctx.step = "profile"
    return ctx


def _trained() -> finetune.TrainedModel:
    """A tiny model after one device training step: kernels met, AdamW state built."""
    device = torch.device("neuron")
    model = tiny_causal_lm("llama", SIZE).to(device)
    trained = finetune.TrainedModel(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                                    torch.randint(3, SIZE.vocab, (1, 8), device=device))
    trained.step()
    return trained


def _report(ctx: PilotContext) -> tuple[dict, str]:
    ctx.recorder.write()
    ctx.recorder.write_html()
    return (json.loads((ctx.workdir / "report.json").read_text()),
            (ctx.workdir / "report.html").read_text())


def test_one_steady_step_gives_the_timeline_and_memory_figures_and_pictures(tmp_path):
    ctx = _context(tmp_path, "neuron", _trained())
    profile.run_once(ctx)
    report, html = _report(ctx)
    step = report["steps"]["profile"]
    assert step["status"] == "passed", step["checks"]
    assert ctx.trained is None  # the fine-tuned copy is let go
    data = step["data"]
    timeline, memory = data["timeline"], data["memory"]
    assert timeline["label"] == "projected" and data["error_band"]["relative"] is None  # eager: no band, says why
    assert timeline["events"] > 0 and timeline["top"]
    assert 0 < sum(k["seconds"] for k in timeline["top"]) <= timeline["device_seconds"]
    assert set(timeline["engine_utilisation"]) == {"TensorE", "VectorE", "ScalarE", "GpSimd", "DMA"}
    assert timeline["engine_busy_seconds"]["TensorE"] > 0 and 0 < timeline["mfu"] < 1
    assert memory["label"] == "emulated count" and memory["events"] > 0
    assert memory["peak_reserved_bytes"] >= memory["peak_allocated_bytes"] > memory["start_allocated_bytes"] > 0
    # a steady step gives back what it took (grads set to None, activations freed)
    assert memory["end_allocated_bytes"] == memory["start_allocated_bytes"]
    assert (tmp_path / data["trace"]).is_file()
    for alt in ("projected device timeline", "projected device timeline, busiest millisecond",
                "top kernels, engines and MFU", "memory over the step"):
        assert f'<img alt="{alt}" src="data:image/png;base64,' in html, alt


def test_a_profiling_failure_is_that_steps_error_and_the_report_goes_on(tmp_path, monkeypatch):
    def broken(step, folder):
        raise RuntimeError("no activity profiler")

    monkeypatch.setattr(profile, "step_pictures", broken)
    trained = finetune.TrainedModel(None, None, None)
    ctx = _context(tmp_path, "neuron", trained)
    profile.run_once(ctx)
    report, html = _report(ctx)
    step = report["steps"]["profile"]
    assert step["status"] == "error" and "no activity profiler" in step["summary"]
    assert report["steps"]["finetune"]["status"] == "not_run"  # the other sections are as they were
    assert "no activity profiler" in html
    assert not torch.neuron.memory._snapshot()["device_traces"][0]  # the memory history is off again


@pytest.mark.parametrize("device, accounting, reason, status", [
    ("cpu", True, profile.NOT_NEURON, "not_available"), ("neuron", False, profile.NO_ACCOUNTING, "not_available"),
    ("neuron", True, profile.NO_FINETUNE, "skipped")])
def test_no_profile_without_the_device_accounting_or_a_fine_tune(tmp_path, device, accounting, reason, status):
    import torch_neuronx

    was = torch_neuronx.kernel_accounting_enabled()
    torch_neuronx.set_kernel_accounting(accounting)
    try:
        ctx = _context(tmp_path, device, None if reason == profile.NO_FINETUNE else finetune.TrainedModel(None, None, None))
        profile.run_once(ctx)
    finally:
        torch_neuronx.set_kernel_accounting(was)
    step = _report(ctx)[0]["steps"]["profile"]
    assert (step["status"], step["summary"], step["data"]) == (status, reason, {"reason": reason})
