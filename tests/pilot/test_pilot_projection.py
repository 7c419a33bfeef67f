"""The pilot's projected figures with hand-made results: the cost step on the default
instance from the dated price table, projected jobs and training run, the HTML."""
from __future__ import annotations

import pytest

from test_pilot_steps import _compilation, _dist, _finetune, _performance
from torch_neuronx.pilot.steps import cost, performance
from torch_neuronx import projection as P
from torch_neuronx.projection.hardware import load_data
from torch_neuronx.runtime.profiles import get_profile

pytestmark = pytest.mark.fast


@pytest.fixture
def default_instance(monkeypatch):
    monkeypatch.delenv("TORCHNEURON_INSTANCE", raising=False)
    return get_profile().name


def _window(seconds=0.03, mfu=0.02, kernels=7):
    step = P.StepProjection(seconds=seconds, seconds_full_overlap=seconds, compute_seconds=seconds,
                            eager_seconds=seconds, graph_seconds=0.0, collective_seconds=0.0,
                            launch_overhead_seconds=0.002, flops=10, mfu=mfu)
    return P.WindowProjection(step=step, eager_kernels=kernels, eager_by_engine={"tensor": seconds},
                              eager_by_op={"aten::mm": {"signatures": 4, "kernel_seconds": 0.02, "launch_seconds": 0.001},
                                           "aten::add.Tensor": {"signatures": 3, "kernel_seconds": 0.005,
                                                                "launch_seconds": 0.001}})


def _projected_performance(projector, price_per_hour=None):
    perf = _performance()
    for length, (ttft, tok) in {"8": (1e-3, 2e-4), "16": (2e-3, 4e-4)}.items():
        perf.generation["eager"]["shapes"][length]["projected"] = {
            "label": "projected", "ttft_seconds": _dist(ttft), "per_token_seconds": _dist(tok),
            "request_seconds": _dist(ttft + 4 * tok),
            "prefill_tokens_per_second": 1.0, "decode_tokens_per_second": 2.0, "flops": 10, "mfu": 0.01}
    perf.generation["eager"]["projected"] = {"label": "projected", "ttft_seconds": _dist(1.5e-3),
                                             "per_token_seconds": _dist(3e-4)}
    performance.add_bands(perf.generation["eager"], "eager")
    window = _window()
    perf.projected_training = performance.project_training(window, 3, 2, projector, price_per_hour)
    perf.projection = {"eager": {"by_op": window.eager_by_op}}
    return perf


@pytest.fixture
def projector(default_instance):
    return P.Projector(default_instance, calibration=P.defaults())


def test_default_instance_is_priced_from_the_dated_table(default_instance):
    p = cost.price_for("neuron", None, default_instance)
    entries = load_data()["instances"][default_instance]["prices"]
    newest = max(entries, key=lambda p: p["date"])
    assert p.usd_per_hour == newest["usd_per_hour"] and p.usd_per_hour > 0
    assert newest["date"] in p.source and newest["region"] in p.source
    given = cost.price_for("neuron", 7.0, default_instance)
    assert (given.usd_per_hour, given.source) == (7.0, "--price-per-hour")
    assert P.price(default_instance, 7.0).source == "given by the user"
    assert P.price(default_instance, 7.0).usd(1800) == pytest.approx(3.5)


def test_cost_step_passes_on_the_default_instance_with_projected_jobs(default_instance, projector, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", "0.5")
    rate = cost.price_for("neuron", None, default_instance)
    per_hour = rate.usd_per_hour
    compiled = projector.compile(eager_kernels=11).to_dict()
    result = cost.run(rate, "emulated-host time: ...", 5, "neuron", _compilation(projected_compile=compiled),
                      _projected_performance(projector), _finetune(), projector=projector)
    assert cost.status(result) is None
    job = result.projected["generation"]["eager"]
    # the largest shape (16): the projected p50 of whole requests, as the performance step summed them
    assert job["seconds"] == pytest.approx(2e-3 + 4 * 4e-4)
    assert job["cost_usd"] == pytest.approx(job["seconds"] * per_hour / 3600)
    assert job["cost_per_million_tokens_usd"] == pytest.approx(job["cost_usd"] * 1e6 / 10)
    run = result.projected["training_run"]
    assert run["run_seconds"] == pytest.approx(0.03)  # 3 steps of 0.01 s
    per_kernel = 0.5 + load_data()["compile_time"]["seconds_per_op"]["value"]  # one-kernel program
    assert run["compile_seconds"] == pytest.approx(7 * per_kernel)  # every signature compiled once
    assert run["total_usd"] == pytest.approx((0.03 + 7 * per_kernel) * per_hour / 3600)
    # one projected compile figure per mode, with its basis, priced at the same rate
    first = result.compile_overhead["projected_first_run"]
    assert list(first) == ["eager"] and first["eager"]["seconds"] == pytest.approx(11 * per_kernel)
    assert first["eager"]["cost_usd"] == pytest.approx(11 * per_kernel * per_hour / 3600)
    assert first["eager"]["basis"] == compiled["basis"]
    assert result.to_data()["projected"]["label"] == "projected"
    assert "projected:" in cost.summary(result) and "per 1M generated tokens" in cost.summary(result)
    html = cost.html(result.to_data())
    assert "Projected on Trainium" in html and "first-run compile" in html
    assert html.count("projected first-run neuronx-cc time") == 1  # one compile figure per mode


def test_without_projection_the_cost_step_keeps_host_figures_only():
    result = cost.run(cost.price_for("cpu", 3.6, None), "measured on cpu", 5, "cpu", _compilation(), _performance(),
                      None)
    assert result.projected is None and "projected" not in result.to_data()
    assert "Projected" not in cost.html(result.to_data())


def test_project_training_and_the_performance_html(projector):
    perf = _projected_performance(projector, price_per_hour=3.6)
    t = perf.projected_training
    assert (t["seconds_per_step"], t["samples_per_second"], t["mfu"], t["kernel_signatures"]) == (
        pytest.approx(0.01), pytest.approx(200.0), 0.02, 7)
    assert t["compile"] == {**projector.compile(eager_kernels=7, graphs=()).to_dict(),
                            "error_band": {"relative": None, "basis": performance.COMPILE_TIME_BASIS}}
    # the fine-tune runs eagerly: AWS publishes nothing to hold it against, and it says so
    assert t["error_band"] == t["cost"]["error_band"] == {"relative": None, "basis": performance.EAGER_BASIS}
    assert t["cost"]["run_usd"] == pytest.approx(0.03 * 3.6 / 3600)
    assert performance.project_training(_window(seconds=0.0), 3, 2, projector) is None
    html = performance.html(perf.to_data())
    assert "projected TTFT p50 ms" in html and "host TTFT p50 ms" in html
    assert html.count("data:image/png;base64,") == 3  # latency, projected vs host, projected per op
    assert performance.summary(perf) == ("eager: TTFT p50 200.0 ms, per token p50 50.0 ms (host); "
                                         "projected TTFT p50 1.500 ms (no band)")
    assert f"no band: {performance.EAGER_BASIS}" in html


def test_compiled_figures_carry_the_published_band_and_eager_ones_say_why(projector):
    """The pilot's projected figures of compiled requests carry the plan's
    leave-one-out band (TTFT: the prefill figure's; per token, requests and their cost: the
    decode figure's); eager ones carry none, with the reason, in report data, summary and HTML."""
    perf = _projected_performance(projector, price_per_hour=3.6)
    perf.generation["compile"] = perf.generation.pop("eager")
    performance.add_bands(perf.generation["compile"], "compile")
    ttft, tpot = P.error_band("ttft_seconds"), P.error_band("tpot_seconds")
    for projected in [s["projected"] for s in perf.generation["compile"]["shapes"].values()] + [
            perf.generation["compile"]["projected"]]:
        assert projected["ttft_error_band"] == {"relative": ttft.fraction, "basis": ttft.text()}
        assert projected["error_band"] == {"relative": tpot.fraction, "basis": tpot.text()}
    assert f"projected TTFT p50 1.500 ms (±{ttft.fraction:.0%})" in performance.summary(perf)
    html = performance.html(perf.to_data())
    assert f"TTFT ±{ttft.fraction:.0%}, rest ±{tpot.fraction:.0%}" in html and ttft.text() in html
    result = cost.run(cost.price_for("neuron", 3.6, projector.device.instance), "emulated", 5, "neuron",
                      _compilation(), perf, None, projector=projector, user_price=3.6)
    job = result.projected["generation"]["compile"]
    assert job["error_band"]["relative"] == tpot.fraction  # a request's cost: mostly decode
    assert f"per 1M generated tokens (±{tpot.fraction:.0%})" in cost.summary(result)
    assert result.projected["training_run"]["error_band"]["relative"] is None  # the fine-tune ran eagerly
    assert tpot.text() in cost.html(result.to_data())
