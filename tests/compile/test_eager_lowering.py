"""The eager opt-in: each new kernel signature lowered to StableHLO once, reported per op.

On Trainium every eager op is lowered through torch-mlir before it runs (TR
python_ops/torch_mlir/kernel.py:808-986); an op that does not lower runs on the CPU, or fails
when ``TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1`` (TR python_ops/base.py:783-804). The report
is the ``lowering`` section of ``torch_neuronx.metrics()``, the pilot's
compilation step and the coverage table's "lowers" column.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import torch_neuronx
from torch_neuronx.compile import kernel_lowering
from torch_neuronx.coverage.probe import CHECKS, classify
from torch_neuronx.coverage.sweep import summarise

pytest.importorskip("torch_mlir")


@pytest.fixture
def lowering():
    """Eager lowering on, metrics restarted; off again afterwards."""
    was_on = kernel_lowering.eager_lowering_active()
    kernel_lowering.set_eager_lowering(True)
    torch_neuronx.reset_metrics()
    yield
    kernel_lowering.set_eager_lowering(was_on)
    torch_neuronx.reset_metrics()


def _run_ops(x):
    (x + 1).relu()
    torch.special.erfinv(x.clamp(-0.5, 0.5))  # torch-mlir 20261001 has no lowering for aten.erfinv


def test_new_signatures_are_lowered_once_and_reported_per_op(lowering, monkeypatch):
    calls = []
    real = kernel_lowering.lower_kernel
    monkeypatch.setattr(kernel_lowering, "lower_kernel",
                        lambda op, args, kwargs=None: calls.append(op) or real(op, args, kwargs))
    x = torch.randn(4, 8, device="neuron")
    torch_neuronx.reset_metrics()  # the report covers the ops below, not randn's
    _run_ops(x)
    report = torch_neuronx.metrics()["lowering"]
    assert report["enabled"] and report["checked"]
    # add.Tensor carries a keyword-only alpha on the dispatcher's stack: it must still trace and lower
    assert {"aten::add.Tensor", "aten::relu", "aten::clamp"} <= set(report["ops_lowered"])
    assert all(report["stablehlo_ops_per_op"][op] > 0 for op in report["ops_lowered"])
    assert report["ops_not_lowered"] == ["aten::erfinv"]
    reason = report["would_fall_back_to_cpu"]["aten::erfinv"]
    assert reason.startswith("would fall back to CPU (lower)") and "erfinv" in reason
    assert report["signatures"] == report["signatures_lowered"] + report["signatures_not_lowered"]

    lowered = len(calls)
    for _ in range(3):  # repeats cost nothing: no new signature reaches the listener
        _run_ops(x)
    torch_neuronx.reset_metrics()  # seen signatures forgotten, the lowering stays cached
    _run_ops(x)
    assert len(calls) == lowered
    again = torch_neuronx.metrics()["lowering"]
    assert again["ops_not_lowered"] == ["aten::erfinv"] and again["signatures"] == report["signatures"]


def test_attention_kernels_are_custom_calls_not_fallbacks(lowering):
    """The emulator runs SDPA with PyTorch's CPU flash-attention kernels, whose backward
    torch-mlir cannot lower; the real product runs attention with its own kernels (its own SDPA
    lowering, TR ``python_ops/torch_mlir/ops/scaled_dot_product_attention.py``), so they are custom
    calls (not checked), as inside compiled graphs, never "would fall back to CPU"."""
    q, k, v = (torch.randn(1, 2, 8, 16, device="neuron", requires_grad=True) for _ in range(3))
    torch_neuronx.reset_metrics()
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    report = torch_neuronx.metrics()["lowering"]
    kernels = {"aten::_scaled_dot_product_flash_attention_for_cpu",
               "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}
    assert not kernels & set(report["ops_not_lowered"]) and not kernels & set(report["ops_lowered"])
    assert report["signatures"] > report["signatures_lowered"] + report["signatures_not_lowered"]  # 2 unchecked
    result = kernel_lowering.lower_kernel("aten::_scaled_dot_product_flash_attention_for_cpu_backward", ())
    assert result.lowered is None and "custom call" in result.reason


def test_strict_fallback_reports_would_fail(lowering, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", "1")
    _run_ops(torch.randn(3, device="neuron"))
    report = torch_neuronx.metrics()["lowering"]
    assert report["fallback_only_for_unimplemented_ops"] is True
    assert report["would_fall_back_to_cpu"]["aten::erfinv"].startswith("would fail (lower)")


def test_switched_off_nothing_is_lowered(monkeypatch):
    kernel_lowering.set_eager_lowering(False)
    torch_neuronx.reset_metrics()
    monkeypatch.setattr(kernel_lowering, "lower_kernel", lambda *a, **k: pytest.fail("lowered while off"))
    _run_ops(torch.randn(5, device="neuron"))
    report = torch_neuronx.metrics()["lowering"]
    assert report["enabled"] is False and report["signatures"] == 0


def test_environment_switch_turns_it_on_at_import(tmp_path):
    code = ("import json, torch, torch_neuronx\n"
            "torch.special.erfinv(torch.zeros(2, device='neuron'))\n"
            "print(json.dumps(torch_neuronx.metrics()['lowering']))\n")
    env = {**__import__("os").environ, "TORCHNEURON_LOWER_EAGER": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         check=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["enabled"] and "aten::erfinv" in report["ops_not_lowered"]


def test_pilot_compilation_step_lists_ops_that_would_fall_back():
    from torch_neuronx.pilot.steps import compilation
    from torch_neuronx.testing.tiny_models import tiny_causal_lm

    model = tiny_causal_lm("llama").to("neuron")
    result = compilation.CompilationResult()
    checks = compilation.run(result, "eager", model, torch.device("neuron"), {8: [[5, 6, 7, 8, 9, 10, 11, 12]]},
                             advance=lambda: None)
    lowering = result.modes["eager"]["lowering"]
    assert lowering["checked"] and lowering["signatures"] > 10 and lowering["signatures_lowered"] > 0
    assert sum(lowering["stablehlo_ops_per_op"].values()) > 0
    assert not any("lowers" in c.name for c in checks)  # a CPU fallback is no failure by default
    html = compilation.html(result.to_data())
    assert "eager kernels lowered to StableHLO" in html and f"{lowering['signatures']} kernel signatures" in html
    assert not kernel_lowering.eager_lowering_active()  # the step restores the switch


def _result(name, passes, lowers):
    cpu = {c: {"ok": True} for c in CHECKS}
    dev = {c: {"ok": passes} for c in CHECKS}
    missing = [] if lowers else ["aten::erfinv"]
    return {"model_type": name, "cpu": cpu, "device_checks": dev, "status": classify(cpu, dev),
            "lowers": {"ok": lowers, "error": None, "ops_not_lowered": missing}}


def test_coverage_figures_with_and_without_the_lowering_check():
    results = [_result("llama", True, True), _result("gpt2", True, False), _result("opt", False, True)]
    overall = summarise(results, installed=["llama", "gpt2", "opt"])["overall"]
    assert overall["coverage_percent"] == pytest.approx(66.7)  # llama and gpt2 pass on the device
    assert overall["coverage_percent_with_lowering"] == pytest.approx(33.3)  # gpt2 has an op that does not lower
    assert (overall["lowers"], overall["lowering_checked"]) == (2, 3)
    assert summarise(results, installed=[])["ops_not_lowered"] == {"aten::erfinv": ["gpt2"]}
    unchecked = [{**r, "lowers": {"ok": None, "error": "not checked", "ops_not_lowered": []}} for r in results]
    assert summarise(unchecked, installed=[])["overall"]["coverage_percent_with_lowering"] is None


def test_out_variant_is_lowered_at_the_result_shape():
    # The eager path hands arange.start_out an empty buffer that the kernel resizes; the lowering
    # traces the buffer at its final shape (meta kernel) rather than failing on the resize.
    out = torch.empty(0, dtype=torch.int64, device="meta")
    result = kernel_lowering.lower_kernel("aten::arange.start_out", (0, 16, 1), {"out": out})
    assert result.lowered is True and result.stablehlo_op_count > 0
