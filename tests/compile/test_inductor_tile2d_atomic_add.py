"""Inductor's 2-D tiled CPU kernels with an accumulating store (Falcon's wrong gradients).

Inductor 2.13 builds a 2-D tiled kernel when a fused input is read transposed; its
atomic add then rewrites the store index twice (``x1 + 2*x1_inner``): wrong sums, or
writes outside the buffer (heap corruption: the process aborts). Our backend corrects
that store (compile/tile2d_atomic_add.py) and keeps Inductor's vectorization.

Plain ``backend="inductor"``: the backward of heads picked by a list index and read back
transposed through a matmul accumulates with ``index_put``. ``backend="neuron"`` decomposes
``index_put`` into ``scatter_add`` (compile/lowering/decompositions/index_put.py), which Inductor hands to ATen on a
multi-threaded CPU, so that graph no longer reaches the store there; an embedding's backward
does (Inductor's ``embedding_dense_backward`` is ``_unsafe_masked_index_put_accumulate``, an
atomic-add scatter), tiled when its output's gradient sums transposed and untransposed parts.
"""
from __future__ import annotations


import pytest
import torch
import torch._dynamo
from torch._inductor.codegen import common

import torch_neuronx
from torch_neuronx.compile import tile2d_atomic_add


@pytest.fixture(autouse=True)
def _fresh(private_neff_cache):
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _heads_through_a_matmul(heads: list[int]):
    def loss(x, y):
        k = x[:, :, heads, :].transpose(1, 2)  # (batch, len(heads), seq, dim), a copy of the picked heads
        return ((y @ k.transpose(-1, -2)) ** 2).sum()  # k's gradient comes back from a bmm, transposed
    return loss


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 16, 3, 16, generator=g), torch.randn(2, 1, 16, 16, generator=g)


def _embedding_read_both_ways(w, y, z, y2):
    ids = torch.tensor([[1, 3, 3, 0, 5, 7, 1, 2, 2, 2, 6, 0, 4, 7, 7, 1]] * 2, device=w.device)
    e = torch.nn.functional.embedding(ids, w)  # (2, 16, 16); rows of w repeat: the adds collide
    # Two gradients come back from bmms transposed, one in e's own layout: e's gradient is read
    # both ways, so Inductor tiles the scatter that accumulates it into w's gradient.
    return ((y @ e.transpose(1, 2)) ** 2).sum() + (e * z).sum() + (y2 @ e.transpose(1, 2)).sin().sum()


def test_an_embedding_whose_gradient_is_read_transposed_gets_the_cpu_gradient_on_neuron(monkeypatch):
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(*shape, generator=g) for shape in ((8, 16), (2, 4, 16), (2, 16, 16), (2, 5, 16))]
    reference = [a.clone().requires_grad_() for a in args]
    _embedding_read_both_ways(*reference).backward()
    corrected = []  # the stores the correction rewrote: this test guards it only while there are some
    builds_lane_indices = tile2d_atomic_add._Tile2DKernel._atomic_add_builds_lane_indices

    def watched(kernel, index):
        taken = builds_lane_indices(kernel, index)
        corrected.append(taken)
        return taken
    monkeypatch.setattr(tile2d_atomic_add._Tile2DKernel, "_atomic_add_builds_lane_indices", watched)

    on_device = [a.to("neuron").requires_grad_() for a in args]
    torch.compile(_embedding_read_both_ways, backend="neuron")(*on_device).backward()
    for device_arg, cpu_arg in zip(on_device, reference):
        torch.testing.assert_close(device_arg.grad.cpu(), cpu_arg.grad, rtol=1e-5, atol=1e-4)
    assert any(corrected)
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
