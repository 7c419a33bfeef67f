"""The drift of a model's outputs under the precisions a Trainium job would use
(``torch_neuronx/numerics/drift.py``): FP32, bf16 to nearest, bf16 stochastic, FP8 matmuls."""
import pytest
import torch

from precision_env import instance
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


def test_an_fp8_linear_is_the_scaled_matmul_of_its_quantized_operands():
    linear = torch.nn.Linear(32, 16).bfloat16()
    x = torch.randn(4, 8, 32, dtype=torch.bfloat16)
    with instance("trn3"):
        assert drift.fp8_format() == torch.float8_e4m3fn
        got = drift.Fp8Linear(linear.to("neuron"), torch.float8_e4m3fn)(x.to("neuron")).cpu()
    linear = linear.cpu()
    flat = x.reshape(-1, 32).float()
    x_scale, w_scale = 448 / flat.abs().amax(), 448 / linear.weight.float().abs().amax()
    expected = torch._scaled_mm((flat * x_scale).clamp(-448, 448).to(torch.float8_e4m3fn),
                                (linear.weight.float() * w_scale).clamp(-448, 448).to(torch.float8_e4m3fn).t(),
                                scale_a=x_scale.reciprocal(), scale_b=w_scale.reciprocal(), out_dtype=torch.bfloat16)
    assert torch.equal(got, (expected + linear.bias).reshape(4, 8, 16))
