"""Stochastic rounding on ``neuron`` (``NEURON_RT_STOCHASTIC_ROUNDING_EN`` / ``_SEED``), as the
Neuron runtime applies it: every rounding of an FP32 value to bf16/fp16/fp8 written on the device.

References: Neuron docs "Neuron Rounding Modes" (AWS's fp16 example) and the PyTorch Neuron
environment variables (off by default, seed 0 when unset)."""
import math

import pytest
import torch

from precision_env import precision_env
from torch_neuronx.numerics import rounding, stochastic_rounding
from torch_neuronx.runtime.errors import ConfigError

STEPS = 2048


def aws_example(lanes: int) -> torch.Tensor:
    """AWS's quick test on ``lanes`` independent values: fp16 1024, plus 0.5 2,048 times."""
    a = torch.full((lanes,), 1024.0, dtype=torch.float16, device="neuron")
    for _ in range(STEPS):
        a = a + 0.5
    return a.float().cpu()


def test_off_by_default_and_the_aws_example_stays_1024():
    """Round-to-nearest-even: 1024.5 is a tie and goes back to 1024 every time (AWS: 1024)."""
    assert rounding.state() == (False, 0)
    assert torch.equal(aws_example(4), torch.full((4,), 1024.0))


def test_aws_example_accumulates_under_stochastic_rounding():
    """Each step adds 0.5 in expectation, so a run ends near 1024 + 2048 * 0.5 = 2048; AWS's
    documented run printed 2056, one draw from that spread (a run's standard deviation is
    about 20: each step below 2048 moves by 0 or 1, above it by 0 or 2)."""
    runs = torch.cat([_seeded(aws_example, seed, 32) for seed in range(4)])
    mean, spread = runs.mean().item(), runs.std().item()
    assert 10 < spread < 40
    assert abs(mean - 2048) < 4 * spread / math.sqrt(len(runs))
    assert runs.min() < 2056 < runs.max()
    assert rounding.state() == (False, 0)  # put back after the block


def _seeded(fn, seed, *args):
    with stochastic_rounding(True, seed):
        return fn(*args)


def test_a_seed_reproduces_its_values_and_another_seed_does_not():
    first, again, other = (_seeded(aws_example, s, 8) for s in (7, 7, 8))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e5m2])
def test_device_casts_are_unbiased_per_value(dtype):
    """E[round(x)] = x for each value: the mean of 64 stochastic casts of the same values lies
    within a few hundredths of an ulp of them, where rounding to nearest is off by a quarter
    ulp on average."""
    x = torch.rand(1024) + 1.0  # one binade: the ulp is one number per dtype
    ulp = 2.0 ** -{torch.bfloat16: 7, torch.float16: 10, torch.float8_e5m2: 2}[dtype]
    device_x = x.to("neuron")
    with stochastic_rounding(True, 3):
        mean = torch.stack([device_x.to(dtype).float().cpu() for _ in range(64)]).mean(0)
    nearest = (x.to(dtype).float() - x).abs().mean() / ulp
    assert nearest > 0.2
    assert ((mean - x).abs().mean() / ulp) < 0.08
    assert torch.equal(device_x.to(dtype).cpu(), x.to(dtype))  # off again: the host's rounding


def test_autocast_results_round_stochastically():
    """A bf16 matmul under autocast accumulates in FP32 and writes bf16: each output is one of
    the two bf16 neighbours of the FP32 product (less than one bf16 ulp away), not always the
    nearest."""
    a, b = torch.randn(32, 64, device="neuron"), torch.randn(64, 32, device="neuron")
    with stochastic_rounding(True, 1):
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)  # device casts: stochastic too
        with torch.autocast("neuron"):
            out = a16 @ b16
    assert out.dtype == torch.bfloat16
    exact = a16.float().cpu() @ b16.float().cpu()
    got = out.float().cpu()
    ulp = torch.exp2(torch.floor(torch.log2(exact.abs())) - 7)
    assert bool(((got - exact).abs() < ulp).all())
    assert not torch.equal(got, exact.bfloat16().float())


def test_small_optimizer_updates_of_bf16_parameters_accumulate():
    """SGD steps of 0.001 on bf16 weights of 1.0 (ulp 2^-7): round-to-nearest drops every
    update, stochastic rounding keeps them in expectation, which is why training in bf16 on
    Trainium is run with it on."""
    def train(stochastic: bool) -> torch.Tensor:
        w = torch.nn.Parameter(torch.ones(512, dtype=torch.bfloat16, device="neuron"))
        opt = torch.optim.SGD([w], lr=0.001)
        with stochastic_rounding(stochastic, 5):
            for _ in range(100):
                w.grad = torch.ones_like(w)
                opt.step()
        return w.detach().float().cpu()

    assert torch.equal(train(False), torch.ones(512))
    assert train(True).mean().item() == pytest.approx(1.0 - 100 * 0.001, abs=0.01)


def test_seed_from_the_environment_and_its_errors():
    with precision_env(NEURON_RT_STOCHASTIC_ROUNDING_EN="1", NEURON_RT_STOCHASTIC_ROUNDING_SEED="42"):
        assert rounding.state() == (True, 42)
    assert rounding.state() == (False, 0)
    for bad in ("abc", "-1", str(2**32)):
        with pytest.raises(ConfigError, match=r"^NEURON_RT_STOCHASTIC_ROUNDING_SEED=") as err:
            with precision_env(NEURON_RT_STOCHASTIC_ROUNDING_SEED=bad):
                pass
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^NEURON_RT_STOCHASTIC_ROUNDING_EN='maybe' is not a boolean"):
        with precision_env(NEURON_RT_STOCHASTIC_ROUNDING_EN="maybe"):
            pass
    assert rounding.state() == (False, 0)
