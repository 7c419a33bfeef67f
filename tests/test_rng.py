"""Per-core random generators: seeding, saved states, determinism."""
from __future__ import annotations

import pytest
import torch


def test_same_seed_same_randn_and_dropout():
    torch.neuron.manual_seed(1234)
    a = torch.randn(64, device="neuron")
    d1 = torch.nn.functional.dropout(torch.ones(256, device="neuron"), 0.5)
    torch.neuron.manual_seed(1234)
    b = torch.randn(64, device="neuron")
    d2 = torch.nn.functional.dropout(torch.ones(256, device="neuron"), 0.5)
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.equal(d1.cpu(), d2.cpu())
    assert 0 < int(d1.eq(0).sum()) < 256
    torch.neuron.manual_seed(4321)
    assert not torch.equal(torch.randn(64, device="neuron").cpu(), a.cpu())


def test_matches_cpu_generator_for_the_same_seed():
    # The core generator is mt19937 like the CPU one: the same seed gives the
    # same numbers, so a CPU run and a neuron run of a seeded job agree.
    torch.manual_seed(7)  # seeds CPU and every core
    dev = torch.randn(5, 7, device="neuron")
    torch.manual_seed(7)
    assert torch.equal(dev.cpu(), torch.randn(5, 7))
    torch.manual_seed(7)
    u = torch.rand(100, device="neuron:2")
    torch.manual_seed(7)
    assert torch.equal(u.cpu(), torch.rand(100))


def test_generators_are_per_core():
    torch.neuron.manual_seed_all(0)
    with torch.neuron.device(1):
        torch.neuron.manual_seed(99)  # only core 1
        assert torch.neuron.initial_seed() == 99
    assert torch.neuron.initial_seed() == 0
    a0 = torch.randn(8, device="neuron:0")
    a1 = torch.randn(8, device="neuron:1")
    torch.neuron.manual_seed_all(0)
    assert torch.equal(torch.randn(8, device="neuron:1").cpu(), a0.cpu())
    assert not torch.equal(a0.cpu(), a1.cpu())
    # drawing on core 2 does not advance core 0
    torch.neuron.manual_seed_all(5)
    torch.randn(100, device="neuron:2")
    x = torch.randn(4, device="neuron:0")
    torch.neuron.manual_seed_all(5)
    assert torch.equal(torch.randn(4, device="neuron:0").cpu(), x.cpu())


def test_rng_state_round_trip():
    torch.neuron.manual_seed(3)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.randn(10, device="neuron")
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(10, device="neuron").cpu(), first.cpu())


def test_rng_state_all_round_trip_as_accelerate_checkpoints_do():
    torch.neuron.manual_seed_all(11)
    for i in range(torch.neuron.device_count()):
        torch.randn(i + 1, device=f"neuron:{i}")  # different state per core
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    assert not torch.equal(states[0], states[1])
    expected = [torch.rand(6, device=f"neuron:{i}").cpu() for i in range(len(states))]
    torch.neuron.manual_seed_all(0)
    torch.neuron.set_rng_state_all(states)
    for i, e in enumerate(expected):
        assert torch.equal(torch.rand(6, device=f"neuron:{i}").cpu(), e)


def test_explicit_generator():
    g = torch.Generator(device="neuron")
    assert g.device == torch.device("neuron:0")
    g.manual_seed(42)
    a = torch.randn(16, device="neuron", generator=g)
    g.manual_seed(42)
    b = torch.randn(16, device="neuron", generator=g)
    assert torch.equal(a.cpu(), b.cpu())
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


def test_bad_rng_state_is_rejected():
    with pytest.raises(RuntimeError):
        torch.neuron.set_rng_state(torch.zeros(3, dtype=torch.uint8))
