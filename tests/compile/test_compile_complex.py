"""Complex values in compiled graphs: lowered as real pairs (TORCH_NEURONX_COMPLEX_DECOMPOSE), results as on CPU."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx
from torch_neuronx.compile.lowering import lower

pytestmark = [pytest.mark.skipif(not lower.available(), reason="torch-mlir not installed"),
              pytest.mark.usefixtures("fresh_dynamo")]


def _rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Llama 4's rotary embedding in complex form: pairs of ``x`` rotated by ``angles``, scaled."""
    freqs = torch.polar(torch.ones_like(angles), angles) * 0.5  # mul.Scalar on complex values
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs[:, None, :]).flatten(2)


def _lowerings() -> list[str]:
    return [graph["lowering"] for graph in torch_neuronx.get_dynamo_metrics()["compiled_graphs"]]


def _inputs(requires_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(5, 3, 8, requires_grad=requires_grad)
    angles = torch.randn(5, 4)
    return x, angles


def test_rotary_complex_multiply_lowers_and_matches_cpu():
    x, angles = _inputs()
    out = torch.compile(_rotary, backend="neuron", fullgraph=True)(x.to("neuron"), angles.to("neuron"))
    torch.testing.assert_close(out.cpu(), _rotary(x, angles))
    assert _lowerings() == ["lowered"]


def test_rotary_gradients_match_cpu():
    x, angles = _inputs(requires_grad=True)
    device_x = x.detach().to("neuron").requires_grad_()
    out = torch.compile(_rotary, backend="neuron", fullgraph=True)(device_x, angles.to("neuron"))
    (out * torch.arange(out.numel()).reshape(out.shape).to("neuron")).sum().backward()
    (_rotary(x, angles) * torch.arange(out.numel()).reshape(out.shape)).sum().backward()
    torch.testing.assert_close(device_x.grad.cpu(), x.grad)
    assert _lowerings() == ["lowered", "lowered"]  # forward and backward (mul's gradient takes _conj)


def test_complex_inputs_outputs_and_conj_match_cpu():
    def conj_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a.conj() * b - a) / 2

    torch.manual_seed(0)
    a, b = torch.randn(4, 3, dtype=torch.complex64), torch.randn(4, 3, dtype=torch.complex64)
    out = torch.compile(conj_product, backend="neuron", fullgraph=True)(a.to("neuron"), b.to("neuron"))
    assert out.dtype == torch.complex64
    torch.testing.assert_close(out.cpu(), conj_product(a, b))
    assert _lowerings() == ["lowered"]


def test_real_pair_graph_computes_what_the_complex_graph_does():
    """The graph lowered (real pairs in and out) gives the complex graph's values, run on CPU."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch_neuronx.compile.lowering.decompositions.complex_values import as_real_pairs

    def mixed(a: torch.Tensor, r: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rows = torch.gather(a, 0, positions)  # TorchTitan reads its rotary table at token positions
        return torch.cat([a * r, a.conj().unsqueeze(0).expand(2, 4, 3).sum(0), rows], dim=-1) - 1j

    torch.manual_seed(0)
    a, r = torch.randn(4, 3, dtype=torch.complex64), torch.randn(4, 3)
    positions = torch.tensor([[3, 0, 1], [2, 2, 0], [1, 3, 3], [0, 1, 2]])
    pairs = as_real_pairs(make_fx(mixed, tracing_mode="fake")(a, r, positions))
    assert not any(getattr(n.meta.get("val"), "is_complex", lambda: False)() for n in pairs.graph.nodes)
    torch.testing.assert_close(torch.view_as_complex(pairs(torch.view_as_real(a), r, positions)),
                               mixed(a, r, positions))


def test_switched_off_complex_ops_fail_to_lower(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_COMPLEX_DECOMPOSE", "0")
    x, angles = _inputs()
    with pytest.raises(RuntimeError, match="no lowering for torch.aten.mul"):
        torch.compile(_rotary, backend="neuron", fullgraph=True)(x.to("neuron"), angles.to("neuron"))


def test_complex_op_without_real_pair_form_names_it():
    def exponential(a: torch.Tensor) -> torch.Tensor:
        return torch.exp(a)

    a = torch.randn(4, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match="no lowering for torch.aten.exp.default on complex values"):
        torch.compile(exponential, backend="neuron", fullgraph=True)(a.to("neuron"))
