"""The pilot's steps with hand-made results: summaries, statuses, the cost arithmetic, the report's JSON.

No model runs here; the end-to-end runs are in tests/pilot/test_pilot.py.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from torch_neuronx.pilot.report import STEP_ORDER, Check, Report, ReportSchemaError, StepSection, to_json_text
from torch_neuronx.pilot.report.html import render_html
from torch_neuronx.pilot.report.schema import Environment
from torch_neuronx.pilot.steps import STEPS, checkpoint, compilation, cost, finetune, inputs, numerics, performance, \
    quality

pytestmark = pytest.mark.fast


def _dist(p50):
    return {"count": 3, "p50": p50, "p95": p50, "p99": p50, "mean": p50}


def _shape(batch, ttft, per_token):
    return {"batch_size": batch, "cold_ttft_seconds": 2 * ttft, "cold_decode_seconds": 0.0,
            "ttft_seconds": _dist(ttft), "per_token_seconds": _dist(per_token),
            "prefill_tokens_per_second": 100.0, "decode_tokens_per_second": 10.0,
            "ttft_samples": [ttft], "per_token_samples": [per_token]}


def _performance():
    return performance.PerformanceResult(generation={"eager": {
        "gen_tokens": 5, "iters": 4, "ttft_seconds": _dist(0.2), "per_token_seconds": _dist(0.05),
        "shapes": {"8": _shape(2, 0.1, 0.02), "16": _shape(2, 0.2, 0.05)}}})


def _compilation(kernel_signatures=10, projected_compile=None):
    cold = {"seconds": 3.0, "new_graphs": 0, "kernel_compilations": 7, "kernel_signatures": kernel_signatures,
            "kernel_disk_hits": 0}
    warm = {**cold, "seconds": 1.0, "kernel_compilations": 0}
    return compilation.CompilationResult(modes={"eager": {
        "available": True, "backend": None, "shapes": {"8": {"cold": cold, "warm": warm},
                                                        "16": {"cold": cold, "warm": warm}},
        "fidelity": {"available": True}, "dynamo": None, "projected_compile": projected_compile}})


def _finetune():
    return finetune.FinetuneResult(steps=3, batch_size=2, seq_len=8, optimizer="AdamW lr=1e-3",
                                   cpu_loss=[5.0, 4.5, 4.0], device_loss=[5.0, 4.5, 4.0001],
                                   max_relative_difference=2.5e-5, device_step_seconds=[1.0, 0.5, 0.5],
                                   train_samples_per_second=4.0)


def test_cost_is_measured_seconds_times_the_hourly_price():
    result = cost.run(cost.price_for("cuda", 3.6, None), "measured on cuda", 5, "cuda",
                      _compilation(), _performance(), _finetune())
    job = result.generation["eager"]
    # the largest shape (16) at p50: TTFT + (gen_tokens - 1) per-token latencies
    assert job["seconds"] == pytest.approx(0.2 + 4 * 0.05)
    assert job["cost_usd"] == pytest.approx(job["seconds"] * 3.6 / 3600)
    assert job["generated_tokens"] == 10
    assert job["cost_per_million_tokens_usd"] == pytest.approx(job["cost_usd"] * 1e6 / 10)
    assert result.finetune == {"job": "3 fine-tune steps", "seconds": 2.0, "cost_usd": pytest.approx(2.0 * 3.6 / 3600)}
    overhead = result.compile_overhead
    assert overhead["measured_cold_seconds"] == pytest.approx(2 * (3.0 - 1.0))
    assert overhead["measured_cold_cost_usd"] == pytest.approx(4.0 * 3.6 / 3600)
    assert overhead["projected_first_run"] == {}  # no projector: nothing projected
    assert cost.status(result) is None
    assert cost.summary(result) == f"eager: ${job['cost_usd']:.6f} per request at $3.60/h (measured on cuda)"


def test_host_time_of_the_emulated_device_is_never_priced():
    """The emulated device's seconds are the host CPU's: pricing them at the instance's rate would
    read as a Trainium cost. They are shown unpriced; only projected seconds get a price."""
    result = cost.run(cost.price_for("neuron", 3.6, "trn2.3xlarge"), "emulated-host time: ...", 5, "neuron",
                      _compilation(), _performance(), _finetune())
    job = result.generation["eager"]
    assert job["seconds"] == pytest.approx(0.2 + 4 * 0.05)
    assert job["cost_usd"] is None and job["cost_per_million_tokens_usd"] is None
    assert result.finetune["cost_usd"] is None and result.compile_overhead["measured_cold_cost_usd"] is None
    assert cost.summary(result) == "not priced: emulated-host time: ..."
    assert "$" not in cost.summary(result)


def test_cost_without_a_price_is_not_available_and_says_why():
    result = cost.run(cost.price_for("cpu", None, None), "measured on cpu", 5, "cpu", _compilation(), _performance(),
                      None)
    assert result.generation["eager"]["cost_usd"] is None and result.finetune is None
    assert result.compile_overhead["projected_first_run"] == {}  # only the neuron device projects
    assert cost.status(result) == "not_available"
    assert cost.summary(result) == "no price for a cpu machine; pass --price-per-hour"


def test_step_summaries_from_hand_made_results():
    r = inputs.InputsResult("inputs.json", "built from the built-in text", "byte-level (built-in)", 2, [8, 16], 16, ["a", "b"])
    assert inputs.summary(r) == "2 × [8, 16] tokens built from the built-in text; saved to inputs.json " \
                                "(reuse with --inputs)"
    num = numerics.NumericsResult({"eager": {"logits": {"8": {"max_abs_error": 3e-5}, "16": {"max_abs_error": 7e-5}},
                                             "tolerance": {"atol": 1e-4, "rtol": 1e-4}}})
    assert numerics.summary(num) == "max |logits error| 7.00e-05 vs CPU (atol 0.0001)"
    assert numerics.status(numerics.NumericsResult()) == "not_available"
    q = quality.QualityResult({"eager": {"token_agreement": 0.75}},
                              {"device_loss": 5.12345, "cpu_loss": 5.12344})
    assert quality.summary(q) == "eager: 75% greedy tokens match; loss 5.1235 vs CPU 5.1234"
    assert finetune.summary(_finetune()) == "3 steps, final loss 4.0001 (CPU 4.0000), 4.0 samples/s"
    assert finetune.status(None) == "skipped" and finetune.summary(None) == "skipped (--train-steps 0)"
    ck = checkpoint.CheckpointResult(0.1, "checkpoint", 0.2, 0.0, "logits")
    assert checkpoint.summary(ck) == "reloaded in a fresh process: max |Δ logits| = 0.0"
    comp = _compilation()
    comp.fresh_process = {"eager": {"first_call_seconds": {"8": 0.5, "16": 0.75}}}
    compilation.mark_unavailable(comp, "compile", "no backend")
    assert compilation.summary(comp) == ("eager: cold 6.00s vs steady 2.000s over 2 shapes, fresh process first "
                                         "calls 1.25s; compile: not available")
    assert performance.summary(_performance()) == "eager: TTFT p50 200.0 ms, per token p50 50.0 ms"
    assert performance.status(performance.PerformanceResult()) == "not_available"


def _report(**step_results) -> Report:
    steps = {name: StepSection(STEPS[name].TITLE) for name in STEP_ORDER}
    for name, result in step_results.items():
        steps[name].result = result
        steps[name].status = "passed"
    return Report(created_utc="2026-01-01T00:00:00+00:00", tool={"torchneuron": "0", "torch": "0",
                  "transformers": None, "python": "3"}, environment=Environment("neuron:0", "neuron"),
                  config={"dtype": "float32", "mode": "eager", "attn_implementation": "sdpa"}, steps=steps)


def test_report_json_is_strict_and_keeps_every_section():
    ft = _finetune()
    ft.device_loss[-1] = math.nan  # a device that produced NaN: recorded as null, never as bare NaN
    rep = _report(finetune=ft, performance=_performance(), compilation=_compilation())
    rep.steps["finetune"].checks.append(Check("fine-tune loss curve matches CPU", False, math.nan, 1e-4))
    text = to_json_text(rep)
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert list(data["steps"]) == list(STEP_ORDER)
    assert data["steps"]["finetune"]["data"]["device_loss"] == [5.0, 4.5, None]
    assert data["steps"]["performance"]["data"]["generation"]["eager"]["shapes"]["16"]["batch_size"] == 2
    assert "training_memory" not in data["steps"]["performance"]["data"]  # only what was measured
    assert data["summary"] == {"checks_total": 1, "checks_passed": 0,
                               "failed_checks": ["finetune: fine-tune loss curve matches CPU"]}
    html = render_html(data)  # every step's section renders from the JSON alone
    assert "3 steps of AdamW" in html and "TTFT p50 ms" in html
    rep.status = "maybe"
    with pytest.raises(ReportSchemaError):
        to_json_text(rep)


def test_the_projected_compile_counts_every_graph_the_mode_compiled(monkeypatch):
    """Compile mode: generation and timing compile graphs after the cold calls (a prefill and a
    decode step per shape); the projected first-run compile counts all of them, as the dynamo
    figures beside it do. Eager signatures count once each, sized by their StableHLO if lowered."""
    graphs = [{"graph_node_count": 40, "stablehlo_op_count": 100}] * 5 + [{"graph_node_count": 7,
                                                                           "stablehlo_op_count": None}]
    dynamo = {"dynamo_unique_graphs": 6, "neuron_backend": {"available": True, "graphs_compiled": 6,
                                                            "compiled_graphs": graphs}}
    monkeypatch.setattr(compilation.compiler, "dynamo_metrics", lambda: dynamo)
    result = compilation.CompilationResult(modes={"compile": {"available": True}},
                                           eager_sizes={"compile": [3, None]})
    compilation.end_mode_with(result, "compile", torch.device("neuron"))
    projected = result.modes["compile"]["projected_compile"]
    assert projected["graphs"] == dynamo["neuron_backend"]["graphs_compiled"] == 6
    assert projected["eager_kernels"] == 2 and projected["programs"] == 8
    assert projected["stablehlo_ops"] == 5 * 100 + 3 and projected["kernel_ops"] == 7 + 1
    assert projected["basis"].startswith("8 neuronx-cc programs") and "(503 StableHLO ops where lowered" in projected["basis"]
    assert "eager_sizes" not in result.to_data()
