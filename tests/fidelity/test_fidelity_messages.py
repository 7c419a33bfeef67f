"""Messages and behaviour users meet on the real product where the emulator reaches the
same situation, each cited as TR path:lines (TR and its public URL: ARCHITECTURE.md, "How
the real product is cited")."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx

pytestmark = pytest.mark.fast


def _gru_cell_args(device):
    torch.manual_seed(0)
    gates = torch.randn(2, 12)
    hidden = torch.randn(2, 4)
    return [t.to(device) for t in (gates, gates.clone(), hidden)]


def test_an_op_without_any_kernel_raises_not_implemented_and_loses_nothing():
    """TR python_ops/base.py:809-818: ``NotImplementedError("Operation <op> is not implemented
    for Neuron. Args: [...]...")``. _thnn_fused_gru_cell has a CUDA kernel only: no neuron
    kernel and no CPU kernel for the fallback. Raised before the arguments are touched: they
    keep their values and version counters, nothing is counted, the device keeps working."""
    args = _gru_cell_args("neuron")
    before = [a.cpu() for a in args]
    versions = [a._version for a in args]
    calls = torch_neuronx.metrics()["kernels"]["calls"]
    with pytest.raises(NotImplementedError) as info:
        torch.ops.aten._thnn_fused_gru_cell(*args)
    message = str(info.value)
    assert message.startswith("Operation _thnn_fused_gru_cell is not implemented for Neuron. Args: [arg0: "
                              "Tensor(shape=[2, 12], dtype=Float, device=neuron:0)")
    assert "arg2: Tensor(shape=[2, 4]" in message and "no CPU kernel" in message
    assert torch_neuronx.metrics()["kernels"]["calls"] == calls
    assert "aten::_thnn_fused_gru_cell" not in torch_neuronx.get_executed_ops()
    for arg, old, version in zip(args, before, versions):
        assert torch.equal(arg.cpu(), old) and arg._version == version
    torch.testing.assert_close((args[0] * 2).cpu(), before[0] * 2)
    # The same call on CPU fails too: PyTorch's own message, no neuron wording.
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        torch.ops.aten._thnn_fused_gru_cell(*_gru_cell_args("cpu"))


@pytest.mark.parametrize("case", ["permuted_destination", "strided_source", "both_strided"])
def test_neuron_to_neuron_copy_with_a_layout_change_works_like_cpu(case):
    """TR python_ops/copy.py (Case C) handles a layout change itself: a strided source is
    made contiguous on the device, a permuted destination is written by a transpose kernel
    (other strides: a host round trip). The "layout change is not supported yet" raise in
    TR cast_policy.py:112-129 is reached only with a non-contiguous destination, which
    write_neuron_to_neuron handles before calling it, so the copy succeeds there and here."""
    torch.manual_seed(0)
    src_cpu = torch.randn(6, 4)
    dst_cpu = torch.zeros(4, 6)
    src, dst = src_cpu.to("neuron"), dst_cpu.to("neuron")
    views = {"permuted_destination": (lambda s, d: (s, d.t())),
             "strided_source": (lambda s, d: (s.t(), d)),
             "both_strided": (lambda s, d: (s[::2], d.t()[1::2]))}[case]
    s_cpu, d_cpu = views(src_cpu, dst_cpu)
    s_dev, d_dev = views(src, dst)
    d_cpu.copy_(s_cpu)
    d_dev.copy_(s_dev)
    assert torch.equal(dst.cpu(), dst_cpu)
    assert torch.equal(src.cpu(), src_cpu)
