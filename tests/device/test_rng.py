"""Random numbers on neuron come from the CPU default generator, as on the real
product (randn, rand, normal_, bernoulli_ and dropout fall back to CPU and consume its
stream: TR tests/device/test_rng_state.py:85-104, TR .../ops/dropout.py:30-34; TR is
defined in ARCHITECTURE.md, "How the real product is cited"). The
per-core generators behind ``torch.neuron.manual_seed`` / ``get_rng_state``
exist and are seeded and saved (TR torch_neuronx/neuron.py:94-190), but no op
draws from them unless passed explicitly."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.fast


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


def test_per_core_generators_are_seeded_and_their_state_round_trips():
    # The API exists and acts on per-core generators (TR torch_neuronx/neuron.py:94-190).
    torch.neuron.manual_seed_all(0)
    with torch.neuron.device(1):
        torch.neuron.manual_seed(99)  # only core 1
        assert torch.neuron.initial_seed() == 99
    assert torch.neuron.initial_seed() == 0
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    assert states[0].dtype == torch.uint8 and states[0].device.type == "cpu"
    assert not torch.equal(states[0], states[1])
    torch.neuron.manual_seed_all(5)
    torch.neuron.set_rng_state_all(states)
    assert [torch.equal(s, t) for s, t in zip(torch.neuron.get_rng_state_all(), states)] == [True] * len(states)
    assert torch.neuron.default_generators()[1].initial_seed() == 99
    torch.manual_seed(4)  # torch.manual_seed seeds the cores too
    assert {g.initial_seed() for g in torch.neuron.default_generators()} == {4}


def test_explicit_neuron_generator_is_used_and_leaves_the_cpu_stream_alone():
    g = torch.Generator(device="neuron")
    assert g.device == torch.device("neuron:0")
    torch.manual_seed(0)
    g.manual_seed(42)
    a = torch.randn(16, device="neuron", generator=g)
    cpu_after = torch.randn(4)
    torch.manual_seed(0)
    assert torch.equal(cpu_after, torch.randn(4))
    g.manual_seed(42)
    assert torch.equal(torch.randn(16, device="neuron", generator=g).cpu(), a.cpu())
    assert torch.equal(a.cpu(), torch.randn(16, generator=torch.Generator().manual_seed(42)))
    c = torch.empty(1000, device="neuron").uniform_(generator=g)
    assert 0 <= float(c.min()) and float(c.max()) <= 1


def test_seed_and_seed_all():
    torch.neuron.seed_all()  # one fresh random seed shared by every core
    seeds = {g.initial_seed() for g in torch.neuron.default_generators()}
    assert len(seeds) == 1
    torch.neuron.seed()  # a fresh seed for the current core only
    s = torch.neuron.initial_seed()
    assert torch.neuron.default_generators()[1].initial_seed() in seeds
    torch.neuron.manual_seed(s)
    assert torch.neuron.initial_seed() == s


def test_multinomial_and_randperm_deterministic():
    probs = torch.tensor([0.1, 0.2, 0.7], device="neuron")
    torch.manual_seed(0)
    m1 = torch.multinomial(probs, 20, replacement=True)
    p1 = torch.randperm(50, device="neuron")
    torch.manual_seed(0)
    assert torch.equal(torch.multinomial(probs, 20, replacement=True).cpu(), m1.cpu())
    assert torch.equal(torch.randperm(50, device="neuron").cpu(), p1.cpu())
    assert sorted(p1.tolist()) == list(range(50))
    torch.manual_seed(0)
    assert torch.equal(torch.multinomial(probs.cpu(), 20, replacement=True), m1.cpu())


def test_bad_rng_state_is_rejected():
    with pytest.raises(RuntimeError):
        torch.neuron.set_rng_state(torch.zeros(3, dtype=torch.uint8))
