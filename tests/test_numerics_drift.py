"""The drift of a model's outputs under the precisions a Trainium job would use
(``torch_neuronx/numerics/drift.py``): FP32, bf16 to nearest, bf16 stochastic, FP8 matmuls."""
import pytest
import torch

from torch_neuronx.numerics import drift
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm


@pytest.fixture(scope="module")
def llama():
    model = tiny_causal_lm("llama", TinySize(layers=1))
    batches = [torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))]
    return model, batches


def test_drift_table_of_a_tiny_llama(llama):
    model, batches = llama
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = {r.precision: r for r in drift.measure(model, batches, seed=3)}
    assert list(rows) == list(drift.PRECISIONS)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the host model is untouched
    fp32, bf16, sr, fp8 = (rows[p] for p in drift.PRECISIONS)
    assert (fp32.max_rel_error, fp32.mean_abs_error, fp32.top1_agreement) == (0.0, 0.0, 1.0)  # FP32 = CPU
    assert 0 < bf16.max_rel_error < 0.05 and 0 < sr.max_rel_error < 0.05
    assert sr != bf16  # stochastic rounding changes the values, not the scale of the drift
    assert fp8.description.startswith("FP8 matmuls (e5m2")  # trn2 takes e5m2, not e4m3fn
    assert fp8.max_rel_error > bf16.max_rel_error
    assert drift.measure(model, batches, seed=3)[2] == sr  # reproducible by seed
    headers, body = drift.table(list(rows.values()))
    assert len(headers) == len(body[0]) == 4 and body[0][1:] == ["0.00e+00", "0.00e+00", "100.0 %"]
    assert len(drift.figure(list(rows.values())).axes) == 1
