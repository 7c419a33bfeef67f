"""64-bit value semantics and memory formats of the device."""
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_neuronx
from torch_neuronx.numerics import narrowing as value_semantics
from torch_neuronx.runtime.errors import ConfigError


@pytest.fixture
def mode():
    before = torch_neuronx.get_64bit_mode()
    yield torch_neuronx.set_64bit_mode
    torch_neuronx.set_64bit_mode(before)


BIG = 2**31 + 5
# The once-per-process narrowing warning is checked in its own process below.
pytestmark = [pytest.mark.fast, pytest.mark.filterwarnings("ignore:neuron. Trainium has no 64-bit device dtypes")]


def test_narrow_wraps_int64_as_int32(mode):
    mode("narrow")
    back = torch.tensor([BIG, -3], dtype=torch.int64).to("neuron").cpu()
    assert back.dtype == torch.int64
    assert back.tolist() == [torch.tensor(BIG).to(torch.int32).item(), -3] == [-(2**31) + 5, -3]
    # A kernel result that leaves the int32 range wraps too.
    y = torch.tensor([2**30], dtype=torch.int64, device="neuron") * 4
    assert y.item() == 0


def test_narrow_gives_float64_float32_precision(mode):
    mode("narrow")
    one = torch.tensor([1.0], dtype=torch.float64, device="neuron")
    s = one + 1e-10
    assert s.dtype == torch.float64
    assert s.item() == 1.0
    assert torch.tensor([1 + 1e-10], dtype=torch.float64).to("neuron").item() == 1.0
    assert torch.tensor([0.1], dtype=torch.float64).to("neuron").item() == float(torch.tensor(0.1, dtype=torch.float32))


def test_off_keeps_64bit_values(mode):
    mode("off")
    assert torch.tensor([BIG], dtype=torch.int64).to("neuron").item() == BIG
    assert (torch.tensor([1.0], dtype=torch.float64, device="neuron") + 1e-10).item() == 1 + 1e-10


def test_strict_raises_and_loses_nothing(mode):
    mode("strict")
    src = torch.tensor([BIG], dtype=torch.int64)
    with pytest.raises(RuntimeError, match="does not fit in int32.*TORCHNEURON_64BIT=strict"):
        src.to("neuron")
    assert src.item() == BIG  # the host tensor is untouched
    with pytest.raises(RuntimeError, match="does not fit in float32"):
        torch.tensor([1.0], dtype=torch.float64, device="neuron") + 1e-10
    # Values that fit pass in strict mode too.
    assert torch.tensor([7, -(2**31)], dtype=torch.int64).to("neuron").tolist() == [7, -(2**31)]


@pytest.mark.parametrize("write", [
    pytest.param(lambda t: t.add_(BIG), id="fast-path add_"),
    pytest.param(lambda t: t.bitwise_left_shift_(40), id="fallback in-place"),
    pytest.param(lambda t: torch.mul(t, 2**40, out=t), id="fallback out="),
    pytest.param(lambda t: t[1:].copy_(torch.tensor([BIG, 1])), id="host-to-device copy_ into a view"),
    pytest.param(lambda t: t.index_put_((torch.tensor([0], device="neuron"),),
                                        torch.tensor(BIG, device="cpu")), id="index_put_"),
])
def test_strict_failed_in_place_op_leaves_the_tensor_as_it_was(mode, write):
    """A strict-mode error must lose nothing: values and version counter as before."""
    mode("strict")
    t = torch.tensor([1, -2, 3], dtype=torch.int64, device="neuron")
    version = t._version
    with pytest.raises(RuntimeError, match="does not fit in int32"):
        write(t)
    assert t.tolist() == [1, -2, 3]
    assert t._version == version
    t.add_(1)  # and the tensor is still usable
    assert t.tolist() == [2, -1, 4]


def test_strict_failed_float64_in_place_op_leaves_the_tensor_as_it_was(mode):
    mode("strict")
    t = torch.tensor([0.5, 0.25], dtype=torch.float64, device="neuron")
    with pytest.raises(RuntimeError, match="does not fit in float32"):
        t.add_(1e-10)
    assert t.tolist() == [0.5, 0.25]


def test_common_path_is_unchanged(mode):
    mode("narrow")
    ids = torch.randint(0, 32000, (4, 128), dtype=torch.int64)
    on_device = ids.to("neuron")
    assert on_device.dtype == torch.int64
    assert torch.equal(on_device.cpu(), ids)
    assert torch.equal(torch.nn.functional.one_hot(on_device[0, :5], 32000).argmax(-1).cpu(), ids[0, :5])
    halves = torch.tensor([0.5, 0.25, 3.0], dtype=torch.float64)
    assert torch.equal(halves.to("neuron").cpu(), halves)  # exactly representable in float32


def test_bad_mode_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="off, narrow, strict"):
        torch_neuronx.set_64bit_mode("wide")
    monkeypatch.setenv("TORCHNEURON_64BIT", "wide")
    with pytest.raises(ConfigError, match="TORCHNEURON_64BIT"):
        value_semantics.mode_from_env()
    monkeypatch.setenv("TORCHNEURON_64BIT", "Strict")
    assert value_semantics.mode_from_env() == "strict"


# One fresh process for both checks of the once-per-process warning (a new interpreter costs
# seconds): print() first, then three real 64-bit values.
_WARNINGS_SCRIPT = textwrap.dedent("""
    import warnings, torch, torch_neuronx
    def warned():
        return sum("no 64-bit device dtypes" in str(w.message) for w in seen)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        text = repr(torch.tensor([1.5, 2.25, 1e-7, -3e5], device="neuron"))
        printed = warned()
        assert torch_neuronx.get_64bit_mode() == "narrow"
        big = torch.tensor([2**31 + 5]).to("neuron")
        after_one = warned()
        for _ in range(2):
            torch.tensor([2**31 + 5]).to("neuron")
        after_three = warned()
    print(text == repr(torch.tensor([1.5, 2.25, 1e-7, -3e5])).replace(")", ", device='neuron:0')"))
    print(printed, after_one, after_three, big.item())
""")


@pytest.fixture(scope="module")
def warnings_in_a_fresh_process() -> list[str]:
    """The script's last two lines: print() unchanged, then the warning counts and the value."""
    out = subprocess.run([sys.executable, "-c", _WARNINGS_SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-2:]


def test_narrow_warns_once_per_process(warnings_in_a_fresh_process):
    _, after_one, after_three, _ = warnings_in_a_fresh_process[1].split()
    assert (after_one, after_three) == ("1", "1")


def test_printing_does_not_narrow_or_warn_but_real_values_still_do(warnings_in_a_fresh_process):
    """print() computes float64 ratios on the device; they must not trigger the
    narrowing warning (the printed tensor has no 64-bit value), while a real
    64-bit value afterwards still does."""
    same_text, counts = warnings_in_a_fresh_process
    printed, after_one, _, value = counts.split()
    assert same_text == "True"
    assert (printed, after_one, value) == ("0", "1", str(2**31 + 5 - 2**32))


def test_channels_last_is_a_clear_error():
    x = torch.randn(2, 3, 4, 4, device="neuron")
    before = x.cpu()
    for request in (
        lambda: x.contiguous(memory_format=torch.channels_last),
        lambda: x.to(memory_format=torch.channels_last),
        lambda: torch.empty_like(x, memory_format=torch.channels_last),
        lambda: torch.nn.Conv2d(3, 4, 3).to("neuron").to(memory_format=torch.channels_last),
        lambda: x.unsqueeze(2).clone(memory_format=torch.channels_last_3d),
    ):
        # TR python_ops/cast_policy.py:38-51: the real product's message first
        with pytest.raises(RuntimeError, match=r"^(clone|_to_copy|empty_like): Neuron tensors only support "
                                               r"contiguous or preserve memory format; got memory format"):
            request()
    assert torch.equal(x.cpu(), before)  # nothing lost
    # The supported formats keep working, including layouts PyTorch picks itself.
    assert x.contiguous(memory_format=torch.contiguous_format).is_contiguous()
    assert torch.empty_like(x, memory_format=torch.preserve_format).shape == x.shape
    perm = x.permute(0, 2, 3, 1)
    assert torch.equal(perm.clone().cpu(), before.permute(0, 2, 3, 1))
    conv = torch.nn.Conv2d(3, 4, 3)
    torch.testing.assert_close(conv.to("neuron")(x).cpu(), conv.cpu()(before))
