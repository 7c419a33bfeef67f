"""Per-core random number generators, with the ``torch.cuda`` RNG API.

Each logical core has a default generator that this API seeds, saves and
restores (Accelerate checkpoints call ``get_rng_state_all``). As on the real
product, no op draws from it by default: random ops on neuron use the CPU
default generator, so ``torch.manual_seed`` decides what they draw and they
equal CPU draws made in the same order. ``TORCHNEURON_RNG=counter`` (or
``set_rng_source("counter")``) makes every random op draw from its core's
counter-based generator instead, so DTensor's sharded draws equal the
unsharded one (docs/device.md, "Random numbers").
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from ..runtime import settings
from ..runtime.extension import _C
from .device_index import device_count
from .device_index import index as _idx


def default_generators() -> tuple[torch.Generator, ...]:
    return tuple(_C._default_generator(i) for i in range(device_count()))


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    return _C._default_generator(_idx(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    _C._default_generator(_idx(device)).set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators()]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    _C._default_generator(_idx(None)).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators():
        g.manual_seed(int(seed))


def seed() -> None:
    _C._default_generator(_idx(None)).seed()


def seed_all() -> None:
    generators = default_generators()
    if generators:
        random_seed = generators[0].seed()
        for g in generators[1:]:
            g.manual_seed(random_seed)


def initial_seed() -> int:
    return _C._default_generator(_idx(None)).initial_seed()


RNG_SOURCES = settings.setting("TORCHNEURON_RNG").choices  # ("cpu", "counter")


def set_rng_source(source: str) -> None:
    """``cpu``: random ops without a neuron generator draw from the CPU default generator (the real
    product's rule); ``counter``: from the core's counter-based generator."""
    if source not in RNG_SOURCES:
        raise ValueError(f"the random-number source must be one of {', '.join(RNG_SOURCES)}, not {source!r}")
    _C._set_counter_draws(source == "counter")


def get_rng_source() -> str:
    return "counter" if _C._counter_draws() else "cpu"


def configure_rng_source() -> None:
    """Apply ``TORCHNEURON_RNG`` (at import and from ``torch_neuronx.reconfigure``)."""
    set_rng_source(settings.get_choice("TORCHNEURON_RNG"))
