"""Random numbers on neuron.

By default they come from the CPU default generator, as on the real product (randn, rand,
normal_, bernoulli_ and dropout fall back to CPU and consume its stream: TR
tests/device/test_rng_state.py:85-104, TR .../ops/dropout.py:30-34; TR is defined in
ARCHITECTURE.md, "How the real product is cited"). The per-core generators behind
``torch.neuron.manual_seed`` / ``get_rng_state`` have the real product's 16-byte state, seed and
offset (TR torch_neuronx/neuron.py:94-190), and no op draws from them unless passed explicitly.

With ``TORCHNEURON_RNG=counter`` (``torch_neuronx.set_rng_source("counter")``) every random op
on neuron draws from its core's generator instead, counter-based: element k of a draw comes from
counter offset + k, so that DTensor's RNG tracker can place shards (docs/device.md, "Random
numbers"; tests/distributed/test_dtensor_random.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

pytestmark = pytest.mark.fast


@pytest.fixture
def counter():
    """Random ops draw from the cores' counter-based generators for the test."""
    torch_neuronx.set_rng_source("counter")
    yield
    torch_neuronx.set_rng_source("cpu")


def test_the_source_is_the_cpu_generator_unless_set_and_a_bad_source_is_refused():
    assert torch_neuronx.get_rng_source() == "cpu"
    with pytest.raises(ValueError, match="must be one of cpu, counter, not 'philox'"):
        torch_neuronx.set_rng_source("philox")
    assert torch_neuronx.get_rng_source() == "cpu"


def test_neuron_draws_equal_cpu_draws_in_the_same_order():
    # torch.randn(device='neuron') "falls back to CPU, consuming CPU RNG state"
    # (TR tests/device/test_rng_state.py:85-104): the same values as CPU draws in the same order.
    torch.manual_seed(7)
    a = torch.randn(5, 7, device="neuron")
    b = torch.rand(100, device="neuron:2")
    c = torch.empty(9, device="neuron").normal_(2.0, 0.5)
    torch.manual_seed(7)
    assert torch.equal(a.cpu(), torch.randn(5, 7))
    assert torch.equal(b.cpu(), torch.rand(100))
    assert torch.equal(c.cpu(), torch.empty(9).normal_(2.0, 0.5))


def test_drawing_on_neuron_advances_the_cpu_stream():
    # Generating on neuron advances the CPU stream (TR tests/device/test_rng_state.py:85-104).
    torch.manual_seed(1)
    torch.randn(10, device="neuron")
    after_neuron = torch.randn(4)
    torch.manual_seed(1)
    torch.randn(10)
    assert torch.equal(after_neuron, torch.randn(4))
    torch.manual_seed(1)
    assert not torch.equal(after_neuron, torch.randn(4))


def test_dropout_masks_follow_torch_manual_seed():
    # Dropout masks are reproducible under torch.manual_seed
    # (TR tests/python_ops/test_native_dropout.py:188-230).
    ones = torch.ones(256, device="neuron")
    torch.manual_seed(3)
    first = F.dropout(ones, 0.5)
    torch.manual_seed(3)
    second = F.dropout(ones, 0.5)
    third = F.dropout(ones, 0.5)
    assert torch.equal(first.cpu(), second.cpu())
    assert not torch.equal(second.cpu(), third.cpu())
    assert 0 < int(first.eq(0).sum()) < 256


def test_dropout_outside_dtensors_region_draws_cpus_mask():
    # The mask comes from CPU native_dropout on the CPU default generator
    # (TR .../neuron_dynamo_backend/utils/stablehlo_utils.py:122-134); only a DTensor's dropout
    # draws from the neuron generator.
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(9)
    got = [F.dropout(x.to("neuron"), 0.25) for _ in range(2)]
    torch.manual_seed(9)
    for drawn in got:
        assert torch.equal(drawn.cpu(), torch.native_dropout(x, 0.25, True)[0])


def test_sdpa_dropout_follows_torch_manual_seed():
    # SDPA dropout uses the CPU generator (TR .../scaled_dot_product_attention.py:153).
    q, k, v = (torch.randn(1, 2, 8, 4).to("neuron") for _ in range(3))
    torch.manual_seed(11)
    first = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(11)
    second = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert torch.equal(first.cpu(), second.cpu())
    torch.manual_seed(11)
    # it consumed the CPU stream: a CPU draw after it differs from one without it
    F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    after = torch.rand(8)
    torch.manual_seed(11)
    assert not torch.equal(after, torch.rand(8))


def test_neuron_manual_seed_does_not_change_what_ops_draw():
    # No op uses the neuron generator (TR .../ops/dropout.py:30-34, test_rng_state.py:85-104), so
    # torch.neuron.manual_seed alone has no effect on what ops draw.
    torch.manual_seed(5)
    torch.neuron.manual_seed(123)
    a = torch.randn(32, device="neuron")
    d = F.dropout(torch.ones(64, device="neuron"), 0.5)
    torch.manual_seed(5)
    torch.neuron.manual_seed_all(999)
    assert torch.equal(torch.randn(32, device="neuron").cpu(), a.cpu())
    assert torch.equal(F.dropout(torch.ones(64, device="neuron"), 0.5).cpu(), d.cpu())


def _offset() -> int:
    return int(torch.neuron.get_rng_state()[8:].view(torch.int64))


def _set_offset(offset: int) -> None:
    state = torch.neuron.get_rng_state()
    state[8:] = torch.tensor([offset], dtype=torch.int64).view(torch.uint8)
    torch.neuron.set_rng_state(state)


def test_state_is_seed_and_offset_and_the_offset_counts_whole_groups_of_four(counter):
    # DTensor's tracker reads bytes 0-7 as the seed and 8-15 as the offset, and moves the
    # offset past a tensor by its size rounded up to 4 (torch/distributed/tensor/_random.py).
    torch.manual_seed(7)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16 and state.device.type == "cpu"
    assert int(state[:8].view(torch.int64)) == 7 and _offset() == 0
    torch.rand(10, device="neuron")
    assert _offset() == 12
    torch.randn(2, 2, device="neuron")
    assert _offset() == 16
    F.dropout(torch.ones(5, device="neuron"), 0.5)
    assert _offset() == 24


def test_a_draw_is_the_slice_of_a_longer_draw_at_its_offset(counter):
    torch.manual_seed(3)
    whole = torch.randn(40, device="neuron").cpu()
    uniforms = torch.rand(40, device="neuron").cpu()
    torch.manual_seed(3)
    _set_offset(8)
    assert torch.equal(torch.randn(3, 5, device="neuron").cpu().flatten(), whole[8:23])
    _set_offset(40 + 12)
    assert torch.equal(torch.rand(8, device="neuron").cpu(), uniforms[12:20])
    # a strided output takes its values in its own row-major order
    torch.manual_seed(3)
    t = torch.empty(8, 5, device="neuron").t()
    t.normal_()
    assert torch.equal(t.cpu().flatten(), whole[:40])


def test_the_same_manual_seed_gives_the_same_values_again(counter):
    def draws():
        return [torch.randn(5, 7, device="neuron"), torch.rand(100, device="neuron:2"),
                torch.empty(9, device="neuron").normal_(2.0, 0.5),
                torch.randint(0, 10, (20,), device="neuron"),
                F.dropout(torch.ones(256, device="neuron"), 0.5),
                torch.multinomial(torch.tensor([0.1, 0.2, 0.7], device="neuron"), 20, True),
                torch.randperm(50, device="neuron"),
                torch.normal(torch.zeros(6, device="neuron"), torch.ones(6, device="neuron"))]

    torch.manual_seed(7)
    first = [t.cpu() for t in draws()]
    again = [t.cpu() for t in draws()]
    torch.manual_seed(7)
    for a, b, c in zip(first, [t.cpu() for t in draws()], again):
        assert torch.equal(a, b)
        assert not torch.equal(a, c)  # the next call draws new values
    assert sorted(first[6].tolist()) == list(range(50))
    assert 0 < int(first[4].eq(0).sum()) < 256


def test_drawing_on_neuron_leaves_the_cpu_stream_and_neuron_manual_seed_decides(counter):
    torch.manual_seed(1)
    torch.randn(10, device="neuron")
    F.dropout(torch.ones(64, device="neuron"), 0.5)
    after_neuron = torch.randn(4)
    torch.manual_seed(1)
    assert torch.equal(after_neuron, torch.randn(4))
    torch.neuron.manual_seed(123)
    a = torch.randn(32, device="neuron").cpu()
    torch.neuron.manual_seed(124)
    assert not torch.equal(torch.randn(32, device="neuron").cpu(), a)
    torch.neuron.manual_seed(123)
    assert torch.equal(torch.randn(32, device="neuron").cpu(), a)


def test_sdpa_dropout_draws_from_the_generator(counter):
    q, k, v = (torch.randn(1, 2, 8, 4).to("neuron") for _ in range(3))
    torch.manual_seed(11)
    first = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert _offset() == 2 * 8 * 8  # one mask value per attention weight
    torch.manual_seed(11)
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).cpu(), first.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_distributions_agree_with_cpu_draws(dtype, counter):
    """Moments of 50,000 draws per distribution against CPU's draws of the same distribution
    (tolerances: about six standard errors)."""
    n = 50_000
    torch.manual_seed(0)
    cases = {
        "uniform_(-1, 3)": (lambda t: t.uniform_(-1, 3), 1.0, 4 / 12 ** 0.5),
        "normal_(0.5, 2)": (lambda t: t.normal_(0.5, 2.0), 0.5, 2.0),
        "bernoulli_(0.3)": (lambda t: t.bernoulli_(0.3), 0.3, (0.3 * 0.7) ** 0.5),
        "exponential_(2)": (lambda t: t.exponential_(2.0), 0.5, 0.5),
        "log_normal_(0, 0.25)": (lambda t: t.log_normal_(0.0, 0.25), 2.718281828 ** (0.25 ** 2 / 2), None),
        "geometric_(0.25)": (lambda t: t.geometric_(0.25), 4.0, (0.75 / 0.25 ** 2) ** 0.5),
        "random_(0, 10)": (lambda t: t.random_(0, 10), 4.5, (99 / 12) ** 0.5),
    }
    for name, (draw, mean, std) in cases.items():
        got = draw(torch.empty(n, device="neuron", dtype=dtype)).cpu().double()
        cpu = draw(torch.empty(n, dtype=dtype)).double()
        spread = float(cpu.std())
        for sample in (got, cpu):
            assert abs(float(sample.mean()) - mean) < 6 * spread / n ** 0.5 + 0.01 * abs(mean), name
        if std is not None:
            assert abs(float(got.std()) - spread) < 0.02 * spread + 0.01, name
    u = torch.empty(n, device="neuron", dtype=dtype).uniform_(-1, 3).cpu()
    assert float(u.min()) >= -1 and float(u.max()) <= 3
    c = torch.empty(n, device="neuron").cauchy_(1.0, 0.5).cpu()
    assert abs(float(c.median()) - 1.0) < 0.02


def test_per_core_generators_are_seeded_and_their_state_round_trips(counter):
    # The API exists and acts on per-core generators (TR torch_neuronx/neuron.py:94-190).
    torch.neuron.manual_seed_all(0)
    with torch.neuron.device(1):
        torch.neuron.manual_seed(99)  # only core 1
        assert torch.neuron.initial_seed() == 99
    assert torch.neuron.initial_seed() == 0
    torch.randn(4, device="neuron:0")
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    assert not torch.equal(states[0], states[1])
    a = torch.randn(8, device="neuron:0").cpu()
    torch.neuron.manual_seed_all(5)
    torch.neuron.set_rng_state_all(states)
    assert [torch.equal(s, t) for s, t in zip(torch.neuron.get_rng_state_all(), states)] == [True] * len(states)
    assert torch.equal(torch.randn(8, device="neuron:0").cpu(), a)
    assert torch.neuron.default_generators()[1].initial_seed() == 99
    torch.manual_seed(4)  # torch.manual_seed seeds the cores too
    assert {g.initial_seed() for g in torch.neuron.default_generators()} == {4}


def test_explicit_generators(counter):
    g = torch.Generator(device="neuron")
    assert g.device == torch.device("neuron:0") and g.get_state().numel() == 16
    torch.manual_seed(0)
    g.manual_seed(42)
    a = torch.randn(16, device="neuron", generator=g)
    assert _offset() == 0  # the default generator did not move
    g.manual_seed(42)
    assert torch.equal(torch.randn(16, device="neuron", generator=g).cpu(), a.cpu())
    torch.neuron.manual_seed(42)  # same seed, same values as the default generator's
    assert torch.equal(torch.randn(16, device="neuron").cpu(), a.cpu())
    c = torch.empty(1000, device="neuron").uniform_(generator=g)
    assert 0 <= float(c.min()) and float(c.max()) <= 1
    assert torch.multinomial(torch.ones(4, device="neuron"), 2, generator=g).device.type == "neuron"
    # a CPU generator passed explicitly is used as on CPU
    cpu_gen = torch.Generator().manual_seed(3)
    assert torch.equal(torch.randn(5, device="neuron", generator=cpu_gen).cpu(),
                       torch.randn(5, generator=torch.Generator().manual_seed(3)))


def test_seed_and_seed_all():
    torch.neuron.seed_all()  # one fresh random seed shared by every core
    seeds = {g.initial_seed() for g in torch.neuron.default_generators()}
    assert len(seeds) == 1
    torch.neuron.seed()  # a fresh seed for the current core only
    s = torch.neuron.initial_seed()
    assert torch.neuron.default_generators()[1].initial_seed() in seeds
    torch.neuron.manual_seed(s)
    assert torch.neuron.initial_seed() == s


def test_bad_input_is_refused_with_pytorchs_or_a_clear_message(counter):
    with pytest.raises(RuntimeError, match="16 bytes .seed and offset"):
        torch.neuron.set_rng_state(torch.zeros(3, dtype=torch.uint8))
    x = torch.empty(3, device="neuron")
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
        x.uniform_(1, 0)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        x.normal_(0, -1)
    with pytest.raises(RuntimeError, match="bernoulli_ expects p to be in"):
        x.bernoulli_(2.0)
    with pytest.raises(RuntimeError, match="to - 1 is out of bounds"):
        torch.empty(3, dtype=torch.int8, device="neuron").random_(0, 1000)
    assert _offset() % 4 == 0  # nothing drawn was half-counted


def test_an_explicit_neuron_generator_is_drawn_from_and_leaves_the_cpu_stream_alone():
    g = torch.Generator(device="neuron").manual_seed(42)
    torch.manual_seed(0)
    a = torch.randn(16, device="neuron", generator=g)
    after = torch.randn(4)
    torch.manual_seed(0)
    assert torch.equal(after, torch.randn(4))
    g.manual_seed(42)
    assert torch.equal(torch.randn(16, device="neuron", generator=g).cpu(), a.cpu())
    torch.manual_seed(0)
    assert not torch.equal(torch.randn(16, device="neuron").cpu(), a.cpu())  # the default draws from CPU
