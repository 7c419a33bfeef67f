"""torch.autocast on ``neuron``: CUDA's op lists with bfloat16."""
from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.fast


def _pair(*shape):
    cpu = torch.randn(*shape)
    return cpu, cpu.to("neuron")


def test_default_autocast_dtype_is_bfloat16():
    assert torch.get_autocast_dtype("neuron") == torch.bfloat16
    with torch.autocast("neuron"):
        assert torch.is_autocast_enabled("neuron")
        assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("neuron")


@pytest.mark.parametrize("op", [
    lambda a, b: a @ b,
    lambda a, b: torch.mm(a, b),
    lambda a, b: torch.nn.functional.linear(a, b),
    lambda a, b: torch.addmm(a, a, b),
    lambda a, b: torch.bmm(a.unsqueeze(0), b.unsqueeze(0)),
])
def test_lower_precision_ops_run_in_bf16(op):
    a_cpu, a = _pair(8, 8)
    b_cpu, b = _pair(8, 8)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = op(a, b)
    assert out.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = op(a_cpu, b_cpu)
    assert ref.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), ref)


@pytest.mark.parametrize("op", [
    lambda x: torch.softmax(x, -1),
    lambda x: torch.log_softmax(x, -1),
    lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
    lambda x: torch.exp(x),
    lambda x: torch.sum(x),
    lambda x: torch.nn.functional.mse_loss(x, x.detach() * 0.5),
])
def test_fp32_ops_run_in_fp32(op):
    x = torch.randn(4, 16, device="neuron").bfloat16()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = op(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), op(x.cpu().float()))


def test_promote_ops_widen():
    a = torch.randn(4, device="neuron").bfloat16()
    b = torch.randn(4, device="neuron")
    with torch.autocast("neuron"):
        assert torch.cat([a, b]).dtype == torch.float32
        assert torch.addcmul(b, a, a).dtype == torch.float32


def test_autocast_forward_backward_matches_cpu_autocast():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    dev_model = copy.deepcopy(model).to("neuron")
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = model(x).float().pow(2).mean()
    ref.backward()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = dev_model(x.to("neuron")).float().pow(2).mean()
    out.backward()
    torch.testing.assert_close(out.cpu(), ref)
    for p_ref, p in zip(model.parameters(), dev_model.parameters()):
        assert p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad.cpu(), p_ref.grad)


def test_binary_cross_entropy_is_banned_like_cuda():
    p = torch.rand(4, device="neuron")
    with torch.autocast("neuron"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        torch.nn.functional.binary_cross_entropy(p, p)


def test_autocast_disabled_region():
    a = torch.randn(4, 4, device="neuron")
    with torch.autocast("neuron"):
        with torch.autocast("neuron", enabled=False):
            assert (a @ a).dtype == torch.float32
        assert (a @ a).dtype == torch.bfloat16
