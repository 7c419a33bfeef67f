"""The unboxed fast path (csrc/aten/FastPathRoutes.cpp) and the fused-SDPA choice
(csrc/aten/native/Attention.cpp), against the same computation on CPU."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_neuronx

pytestmark = pytest.mark.fast

aten = torch.ops.aten


def _x():
    return torch.randn(4, 6)


def _y():
    return torch.randn(4, 6)


# One call per registered op: (inputs, function). Every output is compared
# bit for bit with CPU: the fast path runs CPU's own kernel.
CASES = {
    "aten::add.Tensor": (lambda: (_x(), _y()), lambda x, y: torch.add(x, y, alpha=2)),
    "aten::add_.Tensor": (lambda: (_x(), _y()), lambda x, y: x.add_(y)),
    "aten::sub.Tensor": (lambda: (_x(), _y()), lambda x, y: x - y),
    "aten::sub_.Tensor": (lambda: (_x(), _y()), lambda x, y: x.sub_(y, alpha=3)),
    "aten::mul.Tensor": (lambda: (_x(), _y()), lambda x, y: x * y),
    "aten::mul_.Tensor": (lambda: (_x(), _y()), lambda x, y: x.mul_(y)),
    "aten::div.Tensor": (lambda: (_x(), _y()), lambda x, y: x / y),
    "aten::div_.Tensor": (lambda: (_x(), _y()), lambda x, y: x.div_(y)),
    "aten::pow.Tensor_Scalar": (lambda: (_x(),), lambda x: x.pow(3)),
    "aten::neg": (lambda: (_x(),), torch.neg),
    "aten::rsqrt": (lambda: (_x().abs() + 1,), torch.rsqrt),
    "aten::sqrt": (lambda: (_x().abs(),), torch.sqrt),
    "aten::exp": (lambda: (_x(),), torch.exp),
    "aten::log": (lambda: (_x().abs() + 1,), torch.log),
    "aten::sin": (lambda: (_x(),), torch.sin),
    "aten::cos": (lambda: (_x(),), torch.cos),
    "aten::tanh": (lambda: (_x(),), torch.tanh),
    "aten::sigmoid": (lambda: (_x(),), torch.sigmoid),
    "aten::silu": (lambda: (_x(),), F.silu),
    "aten::silu_backward": (lambda: (_x(), _y()), lambda g, x: aten.silu_backward(g, x)),
    "aten::relu": (lambda: (_x(),), torch.relu),
    "aten::gelu": (lambda: (_x(),), lambda x: F.gelu(x, approximate="tanh")),
    "aten::gelu_backward": (lambda: (_x(), _y()), lambda g, x: aten.gelu_backward(g, x)),
    "aten::where.self": (lambda: (_x(), _y()), lambda x, y: torch.where(x > 0, x, y)),
    "aten::masked_fill_.Scalar": (lambda: (_x(), _y()), lambda x, y: x.masked_fill_(y > 0, 1.5)),
    "aten::fill_.Scalar": (lambda: (_x(),), lambda x: x.fill_(3.25)),
    "aten::zero_": (lambda: (_x(),), lambda x: x.zero_()),
    "aten::lerp_.Scalar": (lambda: (_x(), _y()), lambda x, y: x.lerp_(y, 0.3)),
    "aten::addcmul_": (lambda: (_x(), _y()), lambda x, y: x.addcmul_(y, y, value=0.5)),
    "aten::addcdiv_": (lambda: (_x(), _y()), lambda x, y: x.addcdiv_(y, y * y + 1, value=0.5)),
    "aten::eq.Scalar": (lambda: (_x(),), lambda x: x.round() == 0),
    "aten::eq.Tensor": (lambda: (_x(), _y()), lambda x, y: x.round() == y.round()),
    "aten::ne.Scalar": (lambda: (_x(),), lambda x: x.round() != 0),
    "aten::ne.Tensor": (lambda: (_x(), _y()), lambda x, y: x.round() != y.round()),
    "aten::lt.Scalar": (lambda: (_x(),), lambda x: x < 0.1),
    "aten::gt.Scalar": (lambda: (_x(),), lambda x: x > 0.1),
    "aten::bitwise_and.Tensor": (lambda: (_x(), _y()), lambda x, y: (x > 0) & (y > 0)),
    "aten::bitwise_or.Tensor": (lambda: (_x(), _y()), lambda x, y: (x > 0) | (y > 0)),
    "aten::bitwise_not": (lambda: (_x(),), lambda x: ~(x > 0)),
    "aten::isneginf": (lambda: (_x(),), lambda x: torch.isneginf(x * float("inf"))),
    "aten::tril": (lambda: (_x(),), lambda x: x.tril(1)),
    "aten::triu": (lambda: (_x(),), lambda x: x.triu(-1)),
    "aten::sum": (lambda: (_x(),), lambda x: x.sum()),
    "aten::sum.dim_IntList": (lambda: (_x(),), lambda x: x.sum(1, keepdim=True)),
    "aten::mean.dim": (lambda: (_x(),), lambda x: x.mean(-1)),
    "aten::argmax": (lambda: (_x(),), lambda x: x.argmax(1)),
    "aten::max": (lambda: (_x(),), lambda x: x.max()),
    "aten::all.dim": (lambda: (_x(),), lambda x: (x > -1).all(1)),
    "aten::any.dim": (lambda: (_x(),), lambda x: (x > 1).any(0)),
    "aten::isin.Tensor_Tensor": (
        lambda: (torch.randint(0, 9, (5, 7)), torch.tensor([1, 4, 8])),
        torch.isin,
    ),
    "aten::mm": (lambda: (_x(), _y()), lambda x, y: x @ y.T),
    "aten::bmm": (lambda: (torch.randn(3, 4, 5), torch.randn(3, 5, 2)), torch.bmm),
    "aten::addmm": (lambda: (torch.randn(4), _x(), _y()), lambda b, x, y: torch.addmm(b, x, y.T)),
    "aten::baddbmm": (
        lambda: (torch.randn(3, 4, 2), torch.randn(3, 4, 5), torch.randn(3, 5, 2)),
        lambda b, x, y: torch.baddbmm(b, x, y, beta=0.5, alpha=2),
    ),
    "aten::_softmax": (lambda: (_x(),), lambda x: torch.softmax(x, -1)),
    "aten::_softmax_backward_data": (
        lambda: (_x(), _y()),
        lambda g, x: aten._softmax_backward_data(g, torch.softmax(x, -1), -1, torch.float32),
    ),
    "aten::_log_softmax": (lambda: (_x(),), lambda x: torch.log_softmax(x, 0)),
    "aten::_log_softmax_backward_data": (
        lambda: (_x(), _y()),
        lambda g, x: aten._log_softmax_backward_data(g, torch.log_softmax(x, -1), -1, torch.float32),
    ),
    "aten::nll_loss_forward": (
        lambda: (_x(), torch.tensor([0, 5, 2, 1])),
        lambda x, t: F.nll_loss(torch.log_softmax(x, -1), t),
    ),
    "aten::nll_loss_backward": (
        lambda: (_x(), torch.tensor([0, 5, 2, 1])),
        lambda x, t: aten.nll_loss_backward(torch.tensor(1.0, device=x.device), x, t, None, 1, -100,
                                            torch.tensor(4.0, device=x.device)),
    ),
    "aten::index_select": (lambda: (_x(), torch.tensor([3, 0, 0])), lambda x, i: x.index_select(0, i)),
    "aten::embedding_dense_backward": (
        lambda: (_x(), torch.tensor([1, 7, 1, 0])),
        lambda g, i: aten.embedding_dense_backward(g, i, 9, -1, False),
    ),
    "aten::cat": (lambda: (_x(), _y()), lambda x, y: torch.cat([x, y, x], 1)),
    "aten::index_copy_": (
        lambda: (_x(), torch.tensor([2, 0]), torch.randn(4, 2)),
        lambda x, i, s: x.index_copy_(1, i, s),
    ),
    "aten::index.Tensor": (
        lambda: (_x(), torch.tensor([3, 1, 3]), torch.tensor([0, 5, 2])),
        lambda x, i, j: x[i, j] + x[:, j].sum(),
    ),
    "aten::index_put_": (
        lambda: (_x(), torch.tensor([3, 1, 3]), torch.randn(3, 6)),
        lambda x, i, v: x.index_put_((i,), v, accumulate=True),
    ),
    "aten::le.Tensor": (lambda: (_x(), _y()), lambda x, y: x <= y),
    "aten::cumsum": (lambda: (torch.randint(0, 9, (4, 6)),), lambda x: x.cumsum(1)),
    "aten::all": (lambda: (_x(),), lambda x: (x > -1).all()),
    "aten::any": (lambda: (_x(),), lambda x: (x > 1).any()),
    # torch.arange allocates an empty result, then runs arange.start_out, which resizes it.
    "aten::arange.start_out": (lambda: (torch.zeros(1),), lambda like: torch.arange(2, 11, 3, device=like.device)),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (
        lambda: (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8), torch.randn(5, 7)),
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
    ),
}


def test_every_fast_path_op_has_a_case():
    assert sorted(torch_neuronx._C._fast_path_ops()) == sorted(CASES)


@pytest.mark.parametrize("op", sorted(CASES))
def test_fast_path_op_matches_cpu_bit_for_bit(op):
    make, fn = CASES[op]
    inputs = make()
    expected = fn(*[t.clone() for t in inputs])
    torch_neuronx.reset_metrics()
    got = fn(*[t.to("neuron") for t in inputs])
    assert got.device.type == "neuron"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got.cpu(), expected)
    assert torch_neuronx.metrics()["kernels"]["per_op"][op]["calls"] >= 1


def _layouts(base):
    """Views of one storage in every layout PyTorch derives flags for: the fast path re-points
    the same recycled alias from each to the next (csrc/runtime/Alias.cpp copies the
    neuron tensor's numel and contiguity flags instead of recomputing them)."""
    return {
        "contiguous 5-d": base[:720].view(2, 3, 4, 5, 6),
        "channels_last": base[:120].view(2, 4, 5, 3).permute(0, 3, 1, 2),
        "channels_last_3d": base[:720].view(2, 4, 5, 6, 3).permute(0, 4, 1, 2, 3),
        "transposed": base[:120].view(10, 12).t(),
        "offset": base[7:27].view(4, 5),
        "expanded": base[:5].view(1, 5).expand(4, 5),
        "6-d": base[:720].view(2, 3, 2, 5, 2, 6),
        "empty": base[:0].view(0, 4),
        "scalar": base[3],
    }


def test_recycled_aliases_take_each_layout_with_its_contiguity():
    cpu_base = torch.randn(720)
    cpu_views, neuron_views = _layouts(cpu_base), _layouts(cpu_base.to("neuron"))
    ops = {
        "neg": torch.neg,  # TensorIterator: output strides follow the input's
        "softmax": lambda x: torch.softmax(x, -1) if x.dim() else x.exp(),  # x.contiguous() first
        "sum": torch.sum,  # numel
        "cat": lambda x: torch.cat([x, x]) if x.dim() else x.neg(),  # suggest_memory_format
        "add": lambda x: x + x,  # non-overlapping and dense (expanded inputs are not)
    }
    for _ in range(2):
        for name, view in neuron_views.items():
            for op_name, op in ops.items():
                expected, got = op(cpu_views[name]), op(view)
                assert got.stride() == expected.stride(), (name, op_name)
                assert torch.equal(got.cpu(), expected), (name, op_name)


def test_recycled_aliases_follow_tensors_of_one_layout_in_different_memory():
    """A recycled alias is found by layout (csrc/runtime/Alias.cpp): tensors of one layout in
    different memory (separate tensors, a slice of a larger storage, fresh results) take turns
    on the same alias, and each call sees its own bytes."""
    cpu = [torch.randn(3, 4), torch.randn(3, 4), torch.randn(100)[:12].view(3, 4)]
    dev = [t.to("neuron") for t in cpu]
    for _ in range(2):
        for i in range(3):
            j = (i + 1) % 3
            assert torch.equal((dev[i] * dev[j]).cpu(), cpu[i] * cpu[j])
            assert torch.equal(torch.neg(dev[j] - dev[i]).cpu(), torch.neg(cpu[j] - cpu[i]))
            dev[i].add_(dev[j]), cpu[i].add_(cpu[j])
            assert torch.equal(dev[i].cpu(), cpu[i]) and torch.equal(dev[j].cpu(), cpu[j])


def test_an_argument_listed_twice_or_more_arguments_than_recycled_aliases():
    """Recycled aliases are lent per call (csrc/runtime/Alias.cpp, 32 per thread): a tensor
    passed twice gets two, a call with more tensors than that makes its own for the rest,
    and every one is free again for the next call."""
    parts = [torch.randn(3, 4) for _ in range(40)]
    on_device = [p.to("neuron") for p in parts]
    for _ in range(2):
        assert torch.equal(torch.cat(on_device).cpu(), torch.cat(parts))
    x = parts[0].clone()
    on_x = x.to("neuron")
    assert on_x.mul_(on_x) is on_x and torch.equal(on_x.cpu(), x.mul_(x))
    assert torch.equal(torch.add(on_x, on_x, alpha=2).cpu(), torch.add(x, x, alpha=2))


def _relayouts():
    """In-place changes to a tensor's own sizes, strides, offset, memory or dtype view, each
    applied to a CPU tensor and its neuron twin alike."""
    return [
        lambda x: x.resize_(4, 6),
        lambda x: x.transpose_(0, 1),
        lambda x: x.as_strided_((3, 4), (1, 3), 2),
        lambda x: x.unsqueeze_(0),
        lambda x: x.squeeze_(0).t_(),
        lambda x: x.resize_(50).copy_(torch.arange(50.0, device=x.device)),  # new memory
        lambda x: x.as_strided_((5, 3), (2, 7), 9),
        lambda x: x.set_(torch.arange(100.0, 130.0, device=x.device).untyped_storage(), 4, (2, 5), (10, 2)),
        lambda x: x.set_(torch.arange(7.0, device=x.device)),
    ]


def test_copies_and_item_see_the_current_layout_through_recycled_aliases():
    """copy_ (both directions and device to device) and item() view neuron tensors through the
    recycled aliases the fast path lends (csrc/runtime/Alias.h, LentCpuAlias), which a tensor
    used again finds still pointing at its last layout: after each in-place change of sizes,
    strides, offset, memory or dtype they see what CPU sees."""
    cpu = torch.arange(24.0)
    dev = cpu.to("neuron")
    for change in _relayouts():
        change(cpu), change(dev)
        for _ in range(2):  # the second time, the alias the first left behind
            got, expected = dev.cpu(), cpu.clone()  # both keep dense strides, else contiguous
            assert got.stride() == expected.stride() and torch.equal(got, expected)
            twin = torch.full(cpu.shape, -1.0, device="neuron")
            assert torch.equal(twin.copy_(dev).cpu(), cpu)  # device to device
            assert dev.flatten()[-1].item() == cpu.flatten()[-1].item()
            assert torch.equal(dev.view(torch.int32).cpu(), cpu.view(torch.int32))
        update = torch.randn(cpu.shape)
        cpu.copy_(update), dev.copy_(update)  # host to device, through the layout
        assert torch.equal(dev.cpu(), cpu)
    scalar_cpu, scalar = torch.arange(6.0), torch.arange(6.0, device="neuron")
    for offset in (0, 3, 5):
        scalar_cpu.as_strided_((), (), offset), scalar.as_strided_((), (), offset)
        assert scalar.item() == scalar_cpu.item()


def test_sdpa_choice_sees_the_current_strides_through_recycled_aliases():
    """The SDPA choice reads strides (CPU's flash kernel wants the last one 1): a query whose
    strides change in place must get CPU's choice for its new strides, not its last ones."""
    base = torch.randn(2, 3, 16, 16)
    q_cpu, k, v = base.clone(), torch.randn(2, 3, 16, 8), torch.randn(2, 3, 16, 8)
    q = q_cpu.to("neuron")
    kn, vn = k.to("neuron"), v.to("neuron")
    choices = set()
    for stride in ((768, 256, 16, 1), (768, 256, 16, 2), (768, 256, 16, 1)):
        q_cpu.as_strided_((2, 3, 16, 8), stride), q.as_strided_((2, 3, 16, 8), stride)
        expected = torch._fused_sdp_choice(q_cpu, k, v)
        assert torch._fused_sdp_choice(q, kn, vn) == expected
        choices.add(expected)
        torch.testing.assert_close(F.scaled_dot_product_attention(q, kn, vn).cpu(),
                                   F.scaled_dot_product_attention(q_cpu, k, v))
    assert len(choices) == 2  # the strides did change CPU's choice


def test_in_place_returns_the_callers_tensor_and_updates_views_and_versions():
    base = torch.zeros(4, 6, device="neuron")
    view = base[1:3]
    version = base._version
    out = view.add_(torch.ones(2, 6, device="neuron"))
    assert out is view
    assert base._version > version
    expected = torch.zeros(4, 6)
    expected[1:3] += 1
    assert torch.equal(base.cpu(), expected)


def test_fresh_results_get_the_dispatch_keys_of_a_neuron_tensor():
    """A CPU kernel's result becomes the neuron tensor in place, its dispatch keys rewritten: they
    must be exactly a factory-made neuron tensor's (backend, autograd and autocast keys), or
    later ops on it would dispatch to CPU kernels or skip neuron autocast."""
    made = torch._C._dispatch_keys(torch.empty(2, device="neuron"))
    a = torch.randn(4, 4).to("neuron")
    results = {"add": a + a, "sum": a.sum(0), "arange": torch.arange(5, device="neuron"),
               "cat": torch.cat([a, a]), "mm": a @ a}
    for name, result in results.items():
        assert torch._C._dispatch_keys(result) == made, name
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert (results["mm"] @ a).dtype == torch.bfloat16  # the result's autocast key works


def test_fast_path_keeps_device_rules():
    a = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    if torch.neuron.device_count() > 1:
        with pytest.raises(RuntimeError, match="neuron:0 and neuron:1"):
            a * torch.ones(3, device="neuron:1")
    # A 0-dim CPU tensor is a scalar, as on CUDA.
    assert torch.equal((a * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))
    # Results live on the inputs' core and are charged to it.
    if torch.neuron.device_count() > 1:
        b = torch.ones(256, device="neuron:1")
        before = torch.neuron.memory_allocated(1)
        c = b + b
        assert c.device == torch.device("neuron:1")
        assert torch.neuron.memory_allocated(1) == before + c.untyped_storage().nbytes()


# The hottest TensorIterator ops against CPU across dtypes and operand kinds: another dtype, a
# Python number, 0-dim CPU tensors, broadcasting, in place (the cases a kernel run on the device
# memory itself would have to tell apart).
TENSOR_ITERATOR_OPS = {
    "add": lambda a, b: torch.add(a, b, alpha=2) if a.dtype != torch.bool else a + b,
    "add_": lambda a, b: a.add_(b),
    "mul": torch.mul,
    "mul_": lambda a, b: a.mul_(b),
}


def _like(t, dtype):
    if dtype == torch.bool:
        return t > 0
    return t.to(dtype) if dtype.is_floating_point else (t * 10).to(dtype)


def _float_or(a, if_float, otherwise):
    return if_float if a.is_floating_point() else otherwise


OTHER = {
    "same shape": lambda a: _like(torch.randn(4, 6), a.dtype),
    "broadcast row": lambda a: _like(torch.randn(6), a.dtype),
    "0-dim cpu": lambda a: _like(torch.tensor(1.75), a.dtype),
    "0-dim cpu int64": lambda a: torch.tensor(3, dtype=torch.int64),
    # (64-bit results are narrowed on the device, so integers get a 16-bit one)
    "0-dim cpu float64": lambda a: _float_or(a, torch.tensor(0.1, dtype=torch.float64),
                                             torch.tensor(2, dtype=torch.int16)),
    "python scalar": lambda a: _float_or(a, 0.1, 3),
    "another dtype": lambda a: torch.randn(4, 6).to(torch.float16 if a.dtype == torch.float32 else torch.float32),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.bool])
@pytest.mark.parametrize("other", sorted(OTHER))
@pytest.mark.parametrize("op", sorted(TENSOR_ITERATOR_OPS))
def test_tensor_iterator_ops_match_cpu(op, other, dtype):
    fn = TENSOR_ITERATOR_OPS[op]
    a = _like(torch.randn(4, 6), dtype)
    b = OTHER[other](a)
    moved = lambda v: v.to("neuron") if isinstance(v, torch.Tensor) and v.dim() > 0 else v  # noqa: E731
    try:
        expected = fn(a.clone(), b)
    except RuntimeError as e:  # in-place into a narrower dtype: the same refusal on the device
        with pytest.raises(RuntimeError, match=str(e).split(" to ")[0]):
            fn(a.to("neuron"), moved(b))
        return
    x = a.to("neuron")
    got = fn(x, moved(b))
    assert got.device.type == "neuron" and got.dtype == expected.dtype
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert torch.equal(got.cpu(), expected)
    if op.endswith("_"):
        assert got is x


# Unary ones: integer inputs are promoted to float by their iterator; pow's exponents 0 and 1 are
# special-cased by its kernel (fill_, copy_).
UNARY_TENSOR_ITERATOR_OPS = {
    "neg": torch.neg,
    "rsqrt": torch.rsqrt,
    "silu": F.silu,
    "pow 2": lambda x: x.pow(2),
    "pow 0.5": lambda x: x.pow(0.5),
    "pow -1.5": lambda x: x.pow(-1.5),
    "pow 0 (fill_)": lambda x: x.pow(0),
    "pow 1 (copy_)": lambda x: x.pow(1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32])
@pytest.mark.parametrize("op", sorted(UNARY_TENSOR_ITERATOR_OPS))
def test_unary_tensor_iterator_ops_match_cpu(op, dtype):
    fn = UNARY_TENSOR_ITERATOR_OPS[op]
    a = (torch.randn(4, 6).abs() * 10 + 1).to(dtype).t()  # a transposed layout
    if dtype == torch.int32 and op == "silu":
        with pytest.raises(NotImplementedError, match="silu_cpu"):
            fn(a.to("neuron"))
        return
    expected, got = fn(a), fn(a.to("neuron"))
    assert got.device.type == "neuron" and got.dtype == expected.dtype
    assert got.stride() == expected.stride()
    assert torch.equal(got.cpu(), expected)


def test_tensor_iterator_ops_keep_layouts_charge_results_and_refuse_what_cpu_refuses():
    base = torch.randn(720)
    views, dev_views = _layouts(base), _layouts(base.to("neuron"))
    for name, view in dev_views.items():
        for fn in (lambda v: v + v, lambda v: v * v, lambda v: v.clone().mul_(v), lambda v: v.clone().fill_(0.5)):
            expected, got = fn(views[name]), fn(view)
            assert got.stride() == expected.stride(), name
            assert torch.equal(got.cpu(), expected), name
    x = torch.ones(256, 4, device="neuron")
    before = torch.neuron.memory_allocated(0)
    y = x * x
    assert torch.neuron.memory_allocated(0) == before + y.untyped_storage().nbytes()
    with pytest.raises(RuntimeError, match=r"output with shape \[256, 4\] doesn't match the broadcast shape"):
        x.add_(torch.ones(2, 256, 4, device="neuron"))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at "
                                           r"least two devices, neuron:0 and cpu! \(while running aten::mul.Tensor"):
        x * torch.ones(4)


@pytest.mark.parametrize("op", ["add_", "atan2_"])  # the fast path; the boxed fallback
def test_operands_viewing_one_memory_are_seen_to_overlap_as_on_cpu(op):
    """Two arguments viewing one neuron storage get one CPU storage (Call.cpp): a partial overlap
    is refused with CPU's error, whole tensors given twice compute CPU's values."""
    for device in ("cpu", "neuron"):
        x = torch.ones(256, 4, device=device)
        with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor"):
            getattr(x[:2], op)(x[1:3])
        assert torch.equal(x.cpu(), torch.ones(256, 4))  # refused before writing
    base = torch.randn(8, 4)
    x = base.to("neuron")
    getattr(x, op)(x)
    getattr(x[::2], op)(x[1::2])  # one storage, no overlap
    expected = base.clone()
    getattr(expected, op)(expected)
    getattr(expected[::2], op)(expected[1::2])
    assert torch.equal(x.cpu(), expected)


def test_fast_path_results_are_narrowed_like_every_other_kernel():
    mode = torch_neuronx.get_64bit_mode()
    try:
        torch_neuronx.set_64bit_mode("off")
        big = torch.tensor([2**40, 1], dtype=torch.int64, device="neuron")
        assert big.add(1).cpu().tolist() == [2**40 + 1, 2]
        torch_neuronx.set_64bit_mode("strict")
        with pytest.raises(RuntimeError, match="does not fit in int32"):
            big.add(1)
        torch_neuronx.set_64bit_mode("narrow")
        assert big.add(1).cpu().tolist() == [1, 2]  # 2**40 + 1 wraps to 1 in int32
        # A strided result (its input's strides) is narrowed as well as a contiguous one.
        wide = torch.tensor([[2**40, 1], [2, 2**33 + 5]])
        torch_neuronx.set_64bit_mode("off")
        strided = wide.to("neuron").t()
        torch_neuronx.set_64bit_mode("narrow")
        got = strided.add(1)
        assert got.stride() == (1, 2)
        assert torch.equal(got.cpu(), (wide.t() + 1).to(torch.int32).to(torch.int64))
    finally:
        torch_neuronx.set_64bit_mode(mode)


def test_in_place_64bit_values_are_still_narrowed_and_strict_loses_nothing():
    """An in-place op's self keeps its memory and layout, so the fast path keeps no record of it
    for after the kernel; 64-bit values are the exception: narrowed, or refused with the tensor
    as it was."""
    mode = torch_neuronx.get_64bit_mode()
    try:
        torch_neuronx.set_64bit_mode("narrow")
        t = torch.tensor([1, 2], dtype=torch.int64, device="neuron")
        assert t.fill_(2**40 + 3) is t and t.cpu().tolist() == [3, 3]  # wraps in int32
        assert t.add_(2**40).cpu().tolist() == [3, 3]
        d = torch.tensor([0.5, 0.25], dtype=torch.float64, device="neuron")
        assert d.mul_(1 + 2**-40).cpu().tolist() == [0.5, 0.25]  # rounded to float32
        torch_neuronx.set_64bit_mode("strict")
        version = t._version
        with pytest.raises(RuntimeError, match="does not fit in int32"):
            t.fill_(2**40)
        assert t.cpu().tolist() == [3, 3] and t._version == version
        f = torch.zeros(2, 3, device="neuron")[:, 1]  # a strided view, 32-bit: nothing kept
        assert f.fill_(7).cpu().tolist() == [7.0, 7.0] and f.stride() == (3,)
    finally:
        torch_neuronx.set_64bit_mode(mode)


def test_signatures_are_counted_per_shape_and_scalar_and_survive_reset():
    a, b = torch.ones(5, device="neuron"), torch.ones(5, device="neuron")
    torch_neuronx.reset_metrics()
    for _ in range(3):
        a + b
    torch.add(a, b, alpha=2)
    torch.ones(6, device="neuron") + torch.ones(6, device="neuron")
    per_op = torch_neuronx.metrics()["kernels"]["per_op"]["aten::add.Tensor"]
    assert per_op["calls"] == 5 and per_op["signatures"] == 3
    torch_neuronx.reset_metrics()
    a + b
    kernels = torch_neuronx.metrics()["kernels"]
    assert kernels["per_op"]["aten::add.Tensor"] == {"calls": 1, "signatures": 1, "misses": 0}
    assert kernels["unique_signatures"] == 1


def test_repeat_counting_is_exact_across_threads():
    a = torch.ones(7, device="neuron")
    torch_neuronx.reset_metrics()

    def work():
        for _ in range(500):
            a.mul(a)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kernels = torch_neuronx.metrics()["kernels"]
    assert kernels["per_op"]["aten::mul.Tensor"]["calls"] == 2000
    assert kernels["per_op"]["aten::mul.Tensor"]["signatures"] == 1


def test_repeats_counted_per_thread_are_exact_read_live_after_a_reset_and_after_the_thread_ends():
    """Each thread counts its repeats itself (no atomic per op): another thread reads them
    while the worker lives, a reset drops what was counted before it, and the counts of a
    thread that ended are kept; signature_calls() agrees with the per-op counts."""
    a = torch.ones(7, device="neuron")
    a.mul(a)
    torch_neuronx.reset_metrics()
    counted, go_on = threading.Event(), threading.Event()

    def work():
        for _ in range(300):
            a.mul(a)
        counted.set()
        go_on.wait()
        for _ in range(200):
            a.mul(a)

    def mul_calls():
        return torch_neuronx.metrics()["kernels"]["per_op"].get("aten::mul.Tensor", {}).get("calls", 0)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        counted.wait(timeout=60)
        assert mul_calls() == 300  # held in the live worker's own counters
        assert sum(torch_neuronx._C._signature_calls().values()) == 300
        torch_neuronx.reset_metrics()
        assert mul_calls() == 0
    finally:
        go_on.set()
        worker.join()
    assert mul_calls() == 200  # after the reset, kept when the worker ended
    torch_neuronx._C._forget_signatures()  # counts stay; the next call is a new signature again
    for _ in range(5):
        a.mul(a)
    kernels = torch_neuronx.metrics()["kernels"]
    assert kernels["per_op"]["aten::mul.Tensor"]["calls"] == 205
    assert sum(torch_neuronx._C._signature_calls().values()) == 205


def _sdpa_inputs():
    return [torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_takes_the_fused_kernel_and_matches_cpu(is_causal):
    q, k, v = _sdpa_inputs()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    out.square().sum().backward()
    qn, kn, vn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    got = F.scaled_dot_product_attention(qn, kn, vn, is_causal=is_causal)
    got.square().sum().backward()
    assert "FlashAttention" in type(got.grad_fn).__name__
    assert torch.equal(got.detach().cpu(), out.detach())
    for mine, ref in ((qn, q), (kn, k), (vn, v)):
        assert torch.equal(mine.grad.cpu(), ref.grad)


def test_sdpa_with_a_mask_that_requires_grad_takes_cpus_choice_and_differentiates():
    """CPU's flash kernel has no gradient for attn_mask, so CPU picks math for
    a mask that requires grad; neuron must choose the same."""
    q, k, v = _sdpa_inputs()
    mask = torch.randn(2, 1, 16, 16, requires_grad=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.square().sum().backward()
    qn, kn, vn, mn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v, mask))
    assert torch._fused_sdp_choice(qn, kn, vn, mn) == torch._fused_sdp_choice(q, k, v, mask)
    assert torch._fused_sdp_choice(qn, kn, vn, mn) == SDPBackend.MATH.value
    got = F.scaled_dot_product_attention(qn, kn, vn, attn_mask=mn)
    got.square().sum().backward()
    torch.testing.assert_close(got.detach().cpu(), out.detach())
    for mine, ref in ((qn, q), (kn, k), (vn, v), (mn, mask)):
        torch.testing.assert_close(mine.grad.cpu(), ref.grad)
    # A mask that does not require grad keeps the fused kernel, as on CPU.
    frozen = mn.detach()
    assert torch._fused_sdp_choice(qn, kn, vn, frozen) == torch._fused_sdp_choice(q, k, v, mask.detach())
    assert torch._fused_sdp_choice(qn, kn, vn, frozen) != SDPBackend.MATH.value


def test_sdpa_kernel_context_selects_math():
    q, k, v = (t.detach().to("neuron") for t in _sdpa_inputs())
    assert torch._fused_sdp_choice(q, k, v) == torch._fused_sdp_choice(q.cpu(), k.cpu(), v.cpu())
    with sdpa_kernel(SDPBackend.MATH):
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.MATH.value
        ref = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu())
        got = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(got.cpu(), ref)


def test_fused_sdpa_can_be_turned_off_by_environment():
    code = (
        "import torch, torch.nn.functional as F\n"
        "q = torch.randn(1, 2, 8, 4, device='neuron')\n"
        "print(torch._fused_sdp_choice(q, q, q))\n"
    )
    env = dict(os.environ, TORCH_NEURONX_ENABLE_NKI_SDPA="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) == SDPBackend.MATH.value
    env["TORCH_NEURONX_ENABLE_NKI_SDPA"] = "maybe"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "TORCH_NEURONX_ENABLE_NKI_SDPA" in bad.stderr


def test_routes_are_registered_when_the_extension_loads_independent_of_python():
    """Structured and foreach ops are routed to the fallback by the extension's
    module init (csrc/aten/CpuFallbackRoutes.cpp), after every static registration,
    so no Python import order is involved: loading `_C` alone is enough."""
    code = textwrap.dedent(f"""
        import glob, importlib.util, torch
        path = glob.glob({os.path.dirname(torch_neuronx.__file__)!r} + "/_C*.so")[0]
        spec = importlib.util.spec_from_file_location("torch_neuronx._C", path)
        C = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(C)
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        print(len(C._ops_routed_to_fallback()) > 100, has("aten::atan2", "PrivateUse1"),
              has("aten::_foreach_add_.List", "PrivateUse1"),
              has("aten::_foreach_div_.ScalarList", "PrivateUse1"),
              "FastPathRoutes.cpp" in torch._C._dispatch_dump("aten::add.Tensor"))
    """)
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # atan2 (structured) and _foreach_add_.List (one kernel on the real product) are routed;
    # in-place ScalarList foreach ops stay per tensor; fast-path kernels are not overridden.
    assert out.stdout.split() == ["True", "True", "True", "False", "True"]
