"""Inductor's 2-D tiled CPU kernels with an accumulating store (issue 29, Falcon's wrong gradients).

The minimal graph: one head picked by a list index, read back transposed through
a matmul. Its backward accumulates (``index_put`` with ``accumulate=True``) a
gradient that arrives transposed, so Inductor 2.13 builds a 2-D tiled kernel
whose atomic add rewrites the store index twice (``x1 + 2*x1_inner``): plain
``torch.compile(backend="inductor")`` on CPU returns wrong gradients, or writes
outside the buffer when the index holds two heads (heap corruption: the process aborts).
Our backend corrects that store (compile/tile2d_atomic_add.py) and keeps Inductor's
vectorization.
"""
from __future__ import annotations

import os

import pytest
import torch
import torch._dynamo
from torch._inductor.codegen import common

import torch_neuronx
from torch_neuronx.compile import tile2d_atomic_add
from torch_neuronx.accounting import use_neff_cache


@pytest.fixture(autouse=True)
def _fresh(tmp_path):
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    use_neff_cache(tmp_path / "neff")
    yield
    torch._dynamo.reset()
    use_neff_cache(os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"])


def _heads_through_a_matmul(heads: list[int]):
    def loss(x, y):
        k = x[:, :, heads, :].transpose(1, 2)  # (batch, len(heads), seq, dim), a copy of the picked heads
        return ((y @ k.transpose(-1, -2)) ** 2).sum()  # k's gradient comes back from a bmm, transposed
    return loss


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 16, 3, 16, generator=g), torch.randn(2, 1, 16, 16, generator=g)


@pytest.mark.parametrize("heads", [[1], [0, 2]])
def test_list_indexed_heads_read_transposed_get_the_cpu_gradient_on_neuron(heads):
    x, y = _inputs()
    loss = _heads_through_a_matmul(heads)
    reference = x.clone().requires_grad_()
    loss(reference, y).backward()

    on_device = x.to("neuron").requires_grad_()
    torch.compile(loss, backend="neuron")(on_device, y.to("neuron")).backward()
    torch.testing.assert_close(on_device.grad.cpu(), reference.grad, rtol=1e-5, atol=1e-4)
    assert {r["lowering"] for r in torch_neuronx.get_dynamo_metrics()["compiled_graphs"]} == {"lowered"}


def test_the_correction_is_inductors_cpu_codegen_for_the_block_only():
    """Inside the block Inductor itself (backend="inductor", CPU tensors) gets the gradient right,
    with its vectorized atomic add; outside it the CPU code generators are Inductor's own."""
    x, y = _inputs()
    loss = _heads_through_a_matmul([1])
    reference = x.clone().requires_grad_()
    loss(reference, y).backward()
    common.init_backend_registration()
    before = common.device_codegens["cpu"], common.custom_backend_passes.get("cpu")
    compiled = x.clone().requires_grad_()
    with tile2d_atomic_add.corrected_cpu_codegen():
        assert common.get_custom_backend_pass_for_device("cpu").uuid()[0] == tile2d_atomic_add.FIX_ID
        torch.compile(loss, backend="inductor")(compiled, y).backward()
    torch.testing.assert_close(compiled.grad, reference.grad, rtol=1e-5, atol=1e-4)
    assert (common.device_codegens["cpu"], common.custom_backend_passes.get("cpu")) == before
