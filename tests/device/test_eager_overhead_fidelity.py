"""The cheap per-op path changes no emulated count, and its recycled CPU aliases stay correct.

The fast path (aten/native/FastPath.h) recycles the CPU tensors it views neuron memory through
(runtime/Alias.h, call_cpu_alias) and keys scalars without boxing them. Neither may change what
the emulator reports: the counts below are derived by hand from the real product's key rules
(cited as ARCHITECTURE.md "How the real product is cited" defines):
shapes and dtypes are keyed, `alpha` of add and the `fill_` value are static arguments (TR
ops/binary.py:8-9, ops/creation.py:44-50), strides are not keyed but a strided input first runs
the contiguity kernel (TR csrc/core/NeuronBindings.cpp:87-140), and compilations are counted apart
from in-memory cache hits (TR csrc/core/compilation/CompilationCache.cpp:566).
"""
from __future__ import annotations

import threading

import pytest
import torch

import torch_neuronx
from torch_neuronx.neuron.memory import block_bytes

F32_64x64 = 64 * 64 * 4  # bytes of one 64x64 float32 tensor


@pytest.fixture
def fresh_cache(private_neff_cache):
    """An empty NEFF cache and zeroed counters, as in a new process."""
    torch_neuronx.reset_metrics()


def test_small_op_loop_counts_match_the_hand_derived_ones(fresh_cache):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=gen).to("neuron")
    b = torch.randn(64, 64, generator=gen).to("neuron")
    torch_neuronx.reset_metrics()
    loops = 50
    for _ in range(loops):
        a + b  # add.Tensor(f32[64,64], f32[64,64], alpha: int type)
        a * b  # mul.Tensor
        a.fill_(1.0)  # fill_.Scalar, value 1.0 static
        a.t() + b  # contiguity kernel of the transposed input, then the same add signature
    a.fill_(2.0)  # a new static value: a new kernel
    torch.add(a, b, alpha=2)  # a static alpha: a new kernel
    metrics = torch_neuronx.metrics()
    compiled = 6  # add, mul, fill_(1.0), contiguous, fill_(2.0), add(alpha=2)
    calls = loops * 5 + 2
    assert metrics["compilation_cache"]["total_compilations"] == compiled
    assert metrics["compilation_cache"]["in_memory_hits"] == calls - compiled
    assert metrics["kernels"]["calls"] == calls
    per_op = {op: (c["calls"], c["signatures"]) for op, c in metrics["kernels"]["per_op"].items()}
    assert per_op == {
        "aten::add.Tensor": (2 * loops + 1, 2),
        "aten::mul.Tensor": (loops, 1),
        "aten::fill_.Scalar": (loops + 1, 2),
        "aten::contiguous": (loops, 1),
    }


def test_memory_peaks_match_the_hand_derived_ones_and_aliases_hold_no_device_memory():
    a = torch.ones(64, 64, device="neuron")
    b = torch.ones(64, 64, device="neuron")
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    x = a + b
    x = a + b  # the new result exists before the old one is released
    assert torch.neuron.max_memory_allocated() == base + 2 * F32_64x64
    y = x * b  # x and b now went through the recycled aliases
    del x, y
    # Nothing of x or y is kept by an alias: their device memory is released.
    assert torch.neuron.memory_allocated() == base
    assert torch.neuron.max_memory_allocated() == base + 2 * F32_64x64


def test_scalar_tensor_accounts_the_fill_kernel_pytorch_composes_it_from(fresh_cache):
    """PyTorch builds scalar_tensor as empty() then fill_() on every device but the CPU, and
    the real product compiles that fill_ with its value static (TR ops/creation.py:44-50): the
    native kernel writes the number itself but must report the same kernels and memory."""
    base = torch.neuron.memory_allocated()
    zeros = [torch.scalar_tensor(0.0, device="neuron") for _ in range(2)]
    minus_inf = torch.scalar_tensor(float("-inf"), device="neuron")
    flag = torch.scalar_tensor(1, dtype=torch.bool, device="neuron")
    # three float32 and one bool, each in a block of the allocator's smallest class
    assert torch.neuron.memory_allocated() == base + 3 * block_bytes(4) + block_bytes(1)
    metrics = torch_neuronx.metrics()
    assert metrics["kernels"]["per_op"] == {"aten::fill_.Scalar": {"calls": 4, "signatures": 3, "misses": 3}}
    assert metrics["compilation_cache"]["total_compilations"] == 3
    assert [t.item() for t in zeros] == [0.0, 0.0] and minus_inf.item() == float("-inf")
    assert flag.dtype == torch.bool and flag.item() is True and flag.device.type == "neuron"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32,
                                   torch.int8, torch.bool, torch.complex64, torch.int64,
                                   torch.float64])
@pytest.mark.parametrize("value", [3, -2.5, True])
def test_scalar_tensor_gives_the_cpu_value(dtype, value):
    expected = torch.scalar_tensor(value, dtype=dtype)
    got = torch.scalar_tensor(value, dtype=dtype, device="neuron")
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected)


def test_attention_with_a_boolean_mask_gives_the_cpu_result():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 3, 8, generator=gen) for _ in range(3))
    mask = torch.tensor([[True, False, True], [True, True, False], [False, True, True]])
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = torch.nn.functional.scaled_dot_product_attention(
        *(t.to("neuron") for t in (q, k, v)), attn_mask=mask.to("neuron"))
    torch.testing.assert_close(got.cpu(), expected)


def test_a_result_made_neuron_in_place_is_a_neuron_tensor_like_any_other():
    """The fast path turns a CPU kernel's result into the neuron tensor itself: its dispatch
    keys (autograd, autocast), device and storage must be those of a tensor allocated on the
    device, or later ops would take CPU routes."""
    a = torch.randn(8, 8).to("neuron")
    allocated = torch.empty(8, 8, device="neuron")
    for result in (a + a, torch.mm(a, a), torch.max(a, dim=1)[0], torch.scalar_tensor(2.0, device="neuron")):
        assert result.device == allocated.device
        assert result.untyped_storage().device == allocated.device
        assert torch._C._dispatch_keys(result) == torch._C._dispatch_keys(allocated.new_empty(result.shape))
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert torch.mm(a + a, a).dtype == torch.bfloat16  # the result of `+` takes neuron's autocast


def test_arange_memory_matches_the_hand_derived_charge():
    """torch.arange allocates an empty tensor and the out= kernel grows it: the device is
    charged the grown size once, and the memory is released with the tensor."""
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    r = torch.arange(1000, device="neuron")
    assert torch.neuron.memory_allocated() == base + block_bytes(1000 * 8)
    assert torch.neuron.max_memory_allocated() == base + block_bytes(1000 * 8)
    s = torch.arange(3, 13, 2, dtype=torch.int32, device="neuron")
    assert torch.neuron.memory_allocated() == base + block_bytes(1000 * 8) + block_bytes(5 * 4)
    assert r.cpu().equal(torch.arange(1000)) and s.cpu().equal(torch.arange(3, 13, 2, dtype=torch.int32))
    del r, s
    assert torch.neuron.memory_allocated() == base


def test_arange_accounts_the_out_kernel_pytorch_composes_it_from(fresh_cache):
    """PyTorch builds torch.arange as empty({0}) then arange.start_out on every device but the
    CPU. The native kernel computes the values on the host but reports that same kernel: one
    signature per dtype and scalar types (the bounds are runtime inputs), which an explicit
    out= call on an empty tensor shares."""
    got = [torch.arange(10, device="neuron"),  # int64, int scalars
           torch.arange(2, 12, device="neuron"),  # the same signature
           torch.arange(0.0, 1.0, 0.25, device="neuron")]  # float32, float scalars
    out = torch.empty(0, dtype=torch.int64, device="neuron")
    got.append(torch.arange(0, 5, out=out))  # the fast path's out= kernel: the first signature
    metrics = torch_neuronx.metrics()
    assert metrics["kernels"]["per_op"] == {
        "aten::arange.start_out": {"calls": 4, "signatures": 2, "misses": 2}}
    assert metrics["compilation_cache"]["total_compilations"] == 2
    expected = [torch.arange(10), torch.arange(2, 12), torch.arange(0.0, 1.0, 0.25), torch.arange(0, 5)]
    for g, e in zip(got, expected):
        assert g.device.type == "neuron" and g.dtype == e.dtype and g.cpu().equal(e)


def test_arange_out_of_the_int32_range_in_strict_mode_raises_and_charges_nothing():
    before = torch_neuronx.get_64bit_mode()
    torch_neuronx.set_64bit_mode("strict")
    try:
        base = torch.neuron.memory_allocated()
        with pytest.raises(RuntimeError, match="does not fit in int32"):
            torch.arange(2**31, 2**31 + 3, device="neuron")
        assert torch.neuron.memory_allocated() == base
    finally:
        torch_neuronx.set_64bit_mode(before)


@pytest.mark.parametrize("position", [0, 63, 64, 130, 191, 192, 199])
@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_the_int64_scan_finds_a_value_out_of_the_int32_range_anywhere(position, value):
    """int64 values are scanned in fixed blocks (Narrowing.cpp): a value that does not fit is
    found in any block and in the tail; the int32 extremes fit."""
    fits = torch.full((200,), 2**31 - 1, dtype=torch.int64)
    fits[::2] = -(2**31)
    before = torch_neuronx.get_64bit_mode()
    torch_neuronx.set_64bit_mode("strict")
    try:
        assert torch.equal(fits.to("neuron").cpu(), fits)
        bad = fits.clone()
        bad[position] = value
        with pytest.raises(RuntimeError, match="does not fit in int32"):
            bad.to("neuron")
    finally:
        torch_neuronx.set_64bit_mode(before)


def _interleaved_results(device: str) -> list[torch.Tensor]:
    """Fast-path ops whose arguments change dtype, shape, offset, strides and sign bit from one
    call to the next, so a recycled alias must be re-pointed completely every time."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 16, generator=gen).to(device)
    y = torch.randn(8, 16, generator=gen).to(device)
    n = torch.arange(12, dtype=torch.int32).reshape(3, 4).to(device)
    h = torch.randn(5, generator=gen).to(torch.bfloat16).to(device)
    out = []
    for _ in range(3):
        out.append(x + y)
        out.append(n * n)  # int32, one tensor twice
        out.append(x[2:, 3:] * 2)  # storage offset
        out.append(x.t() + y.t())  # strides
        out.append(torch.neg(h))  # bfloat16
        out.append(torch.add(torch._neg_view(x), y))  # the negative bit
        out.append(torch.sum(x, dim=1))
        out.append(torch.cat([x, y, x, y], dim=0))  # a list: several aliases live at once
    z = x.clone()
    z.add_(z)  # in place, the written tensor also read
    out.append(z)
    grown = torch.empty(0, dtype=torch.int32).to(device)
    torch.arange(0, 40, out=grown)  # the kernel gives the out= alias new memory
    out.append(grown)
    out.append(x * y)  # aliases are recycled after the grown one
    return [t.cpu() for t in out]


def test_recycled_aliases_give_the_cpu_results():
    expected = _interleaved_results("cpu")
    got = _interleaved_results("neuron")
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_recycled_aliases_are_per_thread():
    expected = _interleaved_results("cpu")
    results, errors = {}, []

    def run(i):
        try:
            for _ in range(5):
                results[i] = _interleaved_results("neuron")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got in results.values():
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=0, atol=0)
