"""Views alias device memory; in-place ops through views update the base;
autograd's version counters see them. Also module/parameter moves."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.fast


def _pair(*shape):
    cpu = torch.randn(*shape)
    return cpu, cpu.clone().to("neuron")


@pytest.mark.parametrize("make_view", [
    lambda t: t.view(4, 6),
    lambda t: t.reshape(24)[5:17],
    lambda t: t.t(),
    lambda t: t[1:, ::2],
    lambda t: t.as_strided((3, 2), (2, 5), 1),
    lambda t: t.unsqueeze(0).expand(2, 6, 4)[1],
    lambda t: t.select(1, 2),
    lambda t: t.narrow(0, 2, 3).transpose(0, 1),
    lambda t: t.unflatten(1, (2, 2)).permute(2, 0, 1)[0],
    lambda t: t.diagonal(),
    lambda t: t.view(torch.int32),
    lambda t: t.unbind(0)[3],
    lambda t: t.split(2, dim=1)[1],
    lambda t: t.chunk(3)[2],
])
def test_inplace_through_view_updates_base(make_view):
    cpu, dev = _pair(6, 4)
    v_cpu, v_dev = make_view(cpu), make_view(dev)
    assert v_dev.device == dev.device
    assert v_dev.untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()
    assert v_dev._is_view() == v_cpu._is_view()
    if v_dev.dtype.is_floating_point:
        v_cpu.mul_(3).add_(1)
        v_dev.mul_(3).add_(1)
    else:
        v_cpu.bitwise_xor_(5)
        v_dev.bitwise_xor_(5)
    assert torch.equal(dev.cpu(), cpu)
    assert torch.equal(v_dev.cpu(), v_cpu)
    dev.zero_()
    assert v_dev.cpu().eq(0).all()


def test_view_of_fallback_output_aliases():
    # Ops run by the fallback that return views (e.g. unfold, view_as_real)
    # must return neuron views of the same storage.
    x = torch.arange(12.0, device="neuron")
    u = x.unfold(0, 4, 2)
    assert u.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    u[0, 0] = 100
    assert x[0].item() == 100
    z = torch.randn(3, 2, device="neuron")
    c = torch.view_as_complex(z)
    c.mul_(2)
    assert torch.view_as_real(c).untyped_storage().data_ptr() == z.untyped_storage().data_ptr()


def test_out_arguments_including_resize():
    a_cpu, a = _pair(5, 3)
    out = torch.empty(0, device="neuron")
    torch.mul(a, 2, out=out)
    assert out.shape == (5, 3) and torch.equal(out.cpu(), a_cpu * 2)
    out_view = torch.zeros(5, 6, device="neuron")[:, ::2]
    torch.add(a, 1, out=out_view)
    assert torch.equal(out_view.cpu(), a_cpu + 1)
    r = torch.empty(2, device="neuron")
    torch.arange(7, out=r)
    assert torch.equal(r.cpu(), torch.arange(7.0))
    vals, idx = torch.empty(0, device="neuron"), torch.empty(0, dtype=torch.long, device="neuron")
    torch.max(a, 1, out=(vals, idx))
    ref_vals, ref_idx = a_cpu.max(1)
    assert torch.equal(vals.cpu(), ref_vals) and torch.equal(idx.cpu(), ref_idx)


def test_version_counters_and_autograd_error():
    x = torch.randn(4, device="neuron", requires_grad=True)
    y = x.exp()
    v = y[1:]
    before = y._version
    v.add_(1)
    assert y._version == v._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_autograd_through_views_matches_cpu():
    cpu, dev = _pair(4, 5)
    grads = []
    for t in (cpu, dev):
        leaf = t.clone().requires_grad_()
        y = leaf * 2
        y[:, 1:3].mul_(y[:, :2].sigmoid())
        y.t()[0].pow_(2)
        y.sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1].cpu(), grads[0])


def test_resize_set_and_storage_sharing():
    t = torch.ones(4, device="neuron")
    t.resize_(2, 3)
    assert t.shape == (2, 3)
    t.fill_(2)
    s = torch.empty(0, device="neuron")
    s.set_(t)
    assert s.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    s.zero_()
    assert t.cpu().eq(0).all()
    src = torch.arange(6.0, device="neuron")
    u = torch.empty(0, device="neuron").set_(src.untyped_storage(), 2, (2,), (2,))
    assert u.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError):
        torch.empty(0, device="neuron").set_(torch.ones(2))  # CPU storage


def test_conv2d_and_channels_last_inputs():
    x = torch.randn(2, 3, 8, 8)
    conv = torch.nn.Conv2d(3, 4, 3)
    ref = conv(x)
    torch.testing.assert_close(conv.to("neuron")(x.to("neuron")).cpu(), ref, atol=1e-5, rtol=1e-5)
    # A channels_last host tensor keeps its strides on the way in (preserve_format);
    # asking the device for channels_last is refused, as on Trainium.
    cl = x.contiguous(memory_format=torch.channels_last).to("neuron")
    assert cl.stride() == x.contiguous(memory_format=torch.channels_last).stride()
    torch.testing.assert_close(conv(cl).cpu(), ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="contiguous_format"):
        x.to("neuron").contiguous(memory_format=torch.channels_last)


def test_param_data_assignment_and_module_moves():
    lin = torch.nn.Linear(3, 3).to("neuron")
    new = torch.randn(3, 3)
    lin.weight.data = new  # shallow-copy assignment across devices, as on CUDA
    assert lin.weight.device.type == "cpu" and torch.equal(lin.weight.data, new)
    lin.weight.data = new.to("neuron:1")
    assert lin.weight.device == torch.device("neuron:1")
    bn = torch.nn.BatchNorm1d(3)
    bn.register_buffer("extra", torch.arange(3))
    bn.to("neuron:2")
    for name, buf in bn.named_buffers():
        assert buf.device == torch.device("neuron:2"), name
    bn.cpu()
    assert bn.running_mean.device.type == "cpu"


def test_sparse_is_a_clear_error():
    dense = torch.eye(3, device="neuron")
    with pytest.raises((RuntimeError, NotImplementedError), match="(?i)sparse|neuron|PrivateUse1"):
        dense.to_sparse()


def test_out_argument_given_new_memory_by_the_kernel():
    # LAPACK-backed kernels set_ their out= results to padded column-major
    # buffers; the neuron tensor must get memory for the whole layout
    # (this used to corrupt the heap in linalg.lstsq's backward).
    torch.manual_seed(0)
    a, b = torch.randn(6, 3), torch.randn(6, 2)
    results = []
    for device in ("cpu", "neuron"):
        ad, bd = (t.detach().to(device).requires_grad_() for t in (a, b))
        sol = torch.linalg.lstsq(ad, bd, driver="gels").solution
        sol.pow(2).sum().backward()
        results.append([t.detach().cpu() for t in (sol, ad.grad, bd.grad)])
    for x, y in zip(*results):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4)
    out = torch.empty(0, device="neuron")
    q = torch.randn(5, 5)
    torch.linalg.inv(q.to("neuron"), out=out)
    torch.testing.assert_close(out.cpu(), torch.linalg.inv(q))
