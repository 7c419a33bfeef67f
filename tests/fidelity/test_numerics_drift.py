"""The drift of a model's outputs under the precisions a Trainium job would use
(``torch_neuronx/numerics/drift.py``): FP32, bf16 to nearest, bf16 stochastic, FP8 matmuls; and the
pilot's numerics step, which reports it with the precision settings."""
import json

import pytest
import torch

from torch_neuronx.numerics import drift
from torch_neuronx.pilot.steps import numerics as step
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm


@pytest.fixture(scope="module")
def measured():
    """A one-layer tiny Llama, its weights before, and what the pilot's step measured of it."""
    model = tiny_causal_lm("llama", TinySize(layers=1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    return model, before, step.precision_drift(model, {16: batch.tolist()})


def test_drift_table_of_a_tiny_llama(measured):
    model, before, data = measured
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the host model is untouched
    rows = {d["precision"]: drift.Drift(**d) for d in data["drift"]}
    assert list(rows) == list(drift.PRECISIONS)
    fp32, bf16, sr, fp8 = (rows[p] for p in drift.PRECISIONS)
    assert (fp32.max_rel_error, fp32.mean_abs_error, fp32.top1_agreement) == (0.0, 0.0, 1.0)  # FP32 = CPU
    assert 0 < bf16.max_rel_error < 0.05 and 0 < sr.max_rel_error < 0.05
    assert sr != bf16  # stochastic rounding changes the values, not the scale of the drift
    assert fp8.description.startswith("FP8 matmuls (e5m2")  # trn2 takes e5m2, not e4m3fn
    assert fp8.max_rel_error > bf16.max_rel_error
    headers, body = drift.table(list(rows.values()))
    assert len(headers) == len(body[0]) == 4 and body[0][1:] == ["0.00e+00", "0.00e+00", "100.0 %"]


def test_the_pilots_numerics_step_reports_settings_drift_and_a_figure(measured):
    data = measured[2]
    assert data["settings"]["auto_cast"] == "none" and data["settings"]["fp8_formats"] == ["float8_e5m2"]
    assert data["basis"] == "host measurement of emulated numerics"
    report = step.NumericsResult(precision=data).to_data()
    json.dumps(report, allow_nan=False)  # the report is strict JSON
    html = step.html(report)
    assert "Drift per precision (host measurement of emulated numerics)" in html
    assert "FP8 matmuls (e5m2, tensor-wise scales), bf16 elsewhere" in html and "data:image/png;base64," in html
    assert "stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN)" in html
