"""The NeuronCore limits NKI kernels meet, per target, read from the one hardware table.

Every figure comes from ``projection/hardware.json`` (through
``runtime.hardware_data``) with its source: the SBUF/PSUM geometry and matmul
tile limits (section ``nki`` of each target), the engine clocks, and the DMA
bandwidth per physical core (the chip's DMA figure shared by its cores, the same
figure the projection uses). Read it only through :func:`limits`.
"""
from __future__ import annotations

import functools

from ..runtime.hardware_data import load_hardware_data
from ..runtime.settings import get_choice

_TARGETS = ("trn1", "trn2", "trn3")


@functools.lru_cache(maxsize=None)
def _table(target: str) -> dict[str, tuple[float, str]]:
    """figure -> (value, citation) of ``target``."""
    data = load_hardware_data()["targets"][target]
    table = {name: (f["value"], f["source"]) for name, f in data["nki"].items()}
    for engine, f in data["per_physical_core"]["clock_hz"].items():
        table[f"{engine}_hz"] = (f["value"], f["source"])
    cores, dma = data["physical_cores_per_chip"], data["per_chip"]["dma_bytes_per_s"]
    table["dma_bytes_per_s"] = (dma["value"] / cores["value"],
                                f"derived: {dma['source']} / {cores['value']} physical cores")
    return table


_ALIASES = {"gen2": "trn1", "gen3": "trn2", "gen4": "trn3"}


def current_target() -> str:
    """``NEURON_PLATFORM_TARGET_OVERRIDE`` if set, else the instance profile's family."""
    override = get_choice("NEURON_PLATFORM_TARGET_OVERRIDE")  # one of _TARGETS or _ALIASES (its declaration)
    if override:
        return _ALIASES.get(override, override)
    from ..runtime.profiles import get_profile

    family = get_profile().family.lower()  # what get_device_properties(0).name reports
    for target in _TARGETS:
        if family.startswith(target):
            return target
    raise ValueError(f"instance family {family!r} has no NKI target; set NEURON_PLATFORM_TARGET_OVERRIDE")


def resolve_target(target: str | None) -> str:
    """``trn1/trn2/trn3`` (or ``gen2/3/4``), default :func:`current_target`."""
    if not target:
        return current_target()
    target = _ALIASES.get(target, target)
    if target not in _TARGETS:
        raise ValueError(f"unknown NKI target {target!r}; known: {sorted(_TARGETS) + sorted(_ALIASES)}")
    return target


def limits(target: str | None = None) -> dict[str, float]:
    """The figures of ``target`` (default: :func:`current_target`), without citations."""
    target = resolve_target(target)
    return {name: value for name, (value, _) in _table(target).items()}


def citation(target: str, figure: str) -> str:
    return _table(resolve_target(target))[figure][1]
