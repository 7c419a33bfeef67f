"""The pilot's projected figures with hand-made results: the cost step on the default
instance from the dated price table, projected jobs and training run, the HTML."""
from __future__ import annotations

import pytest

from test_pilot_steps import _compilation, _dist, _finetune, _performance
from torch_neuronx.pilot.steps import cost, performance
from torch_neuronx.projection import price
from torch_neuronx.projection.hardware import load_data
from torch_neuronx.runtime.profiles import get_profile


@pytest.fixture
def default_instance(monkeypatch):
    monkeypatch.delenv("TORCHNEURON_INSTANCE", raising=False)
    return get_profile().name


def _projected_performance():
    perf = _performance()
    for length, (ttft, tok) in {"8": (1e-3, 2e-4), "16": (2e-3, 4e-4)}.items():
        perf.generation["eager"]["shapes"][length]["projected"] = {
            "label": "projected", "ttft_seconds": _dist(ttft), "per_token_seconds": _dist(tok),
            "prefill_tokens_per_second": 1.0, "decode_tokens_per_second": 2.0, "flops": 10, "mfu": 0.01}
    perf.generation["eager"]["projected"] = {"label": "projected", "ttft_seconds": _dist(1.5e-3),
                                             "per_token_seconds": _dist(3e-4)}
    window = {"label": "projected", "seconds": 0.03, "mfu": 0.02,
              "eager_by_op": {"aten::mm": {"signatures": 4, "kernel_seconds": 0.02, "launch_seconds": 0.001},
                              "aten::add.Tensor": {"signatures": 3, "kernel_seconds": 0.005,
                                                   "launch_seconds": 0.001}}}
    perf.projected_training = performance.project_training(window, steps=3, rows=2)
    perf.projection = {"eager": {"by_op": window["eager_by_op"]}}
    return perf


def test_default_instance_is_priced_from_the_dated_table(default_instance):
    value, source = cost.price_for("neuron", None, default_instance)
    entries = load_data()["instances"][default_instance]["prices"]
    newest = max(entries, key=lambda p: p["date"])
    assert value == newest["usd_per_hour"] and value > 0
    assert newest["date"] in source and newest["region"] in source
    assert cost.price_for("neuron", 7.0, default_instance) == (7.0, "--price-per-hour")
    assert price(default_instance, 7.0)["source"] == "given by the user"


def test_cost_step_passes_on_the_default_instance_with_projected_jobs(default_instance):
    rate, source = cost.price_for("neuron", None, default_instance)
    per_kernel = 0.5
    result = cost.run(rate, source, "emulated-host time: ...", 5, "neuron", _compilation(per_kernel=per_kernel),
                      _projected_performance(), _finetune())
    assert cost.status(result) is None
    job = result.projected["generation"]["eager"]
    # the largest shape (16) at projected p50: TTFT + (gen_tokens - 1) per-token latencies
    assert job["seconds"] == pytest.approx(2e-3 + 4 * 4e-4)
    assert job["cost_usd"] == pytest.approx(job["seconds"] * rate / 3600)
    assert job["cost_per_million_tokens_usd"] == pytest.approx(job["cost_usd"] * 1e6 / 10)
    run = result.projected["training_run"]
    assert run["seconds"] == pytest.approx(0.03)  # 3 steps of 0.01 s
    assert run["compile_seconds"] == pytest.approx(7 * per_kernel)  # every signature compiled once
    assert run["total_cost_usd"] == pytest.approx((0.03 + 3.5) * rate / 3600)
    assert result.to_data()["projected"]["label"] == "projected"
    assert "projected:" in cost.summary(result) and "per 1M generated tokens" in cost.summary(result)
    html = cost.html(result.to_data())
    assert "Projected on Trainium" in html and "first-run compile" in html


def test_without_projection_the_cost_step_keeps_host_figures_only():
    result = cost.run(3.6, "--price-per-hour", "measured on cpu", 5, "cpu", _compilation(), _performance(), None)
    assert result.projected is None and "projected" not in result.to_data()
    assert "Projected" not in cost.html(result.to_data())


def test_project_training_and_the_performance_html():
    perf = _projected_performance()
    t = perf.projected_training
    assert t == {"label": "projected", "seconds_per_step": pytest.approx(0.01), "samples_per_second":
                 pytest.approx(200.0), "mfu": 0.02, "kernel_signatures": 7}
    assert performance.project_training({"label": "projected", "seconds": 0.0}, 3, 2) is None
    html = performance.html(perf.to_data())
    assert "projected TTFT p50 ms" in html and "host TTFT p50 ms" in html
    assert html.count("data:image/png;base64,") == 3  # latency, projected vs host, projected per op
    assert performance.summary(perf) == ("eager: TTFT p50 200.0 ms, per token p50 50.0 ms (host); "
                                         "projected TTFT p50 1.500 ms")
