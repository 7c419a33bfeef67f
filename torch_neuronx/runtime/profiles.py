"""Trainium instance profiles and the logical-core topology of a process.

A profile is the hardware a job would run on: chips, physical NeuronCores per
chip, HBM per chip and the default logical-core configuration (LNC). Every one
of these figures, like the prices and performance figures, is read from the one
hardware table ``projection/hardware.json`` (with its source; ``hardware_data``).
Profiles marked ``confirmed=False`` are widely reported but not stated in the AWS
documentation we could read; they are shown as such.
"""
from __future__ import annotations

import dataclasses
import os

from . import settings
from .errors import ConfigError
from .hardware_data import figure, load_hardware_data

GiB = 1024**3


@dataclasses.dataclass(frozen=True)
class InstanceProfile:
    name: str
    family: str  # what get_device_properties().name reports, as on real hardware
    chips: int
    cores_per_chip: int  # physical NeuronCores
    hbm_per_chip: int  # bytes
    default_lnc: int
    allowed_lnc: tuple[int, ...]
    confirmed: bool  # are chips/cores/HBM stated by AWS docs?

    def logical_cores(self, lnc: int) -> int:
        return self.chips * self.cores_per_chip // lnc

    def hbm_per_logical_core(self, lnc: int) -> int:
        return self.hbm_per_chip * lnc // self.cores_per_chip


def _profiles() -> dict[str, InstanceProfile]:
    data = load_hardware_data()
    out = {}
    for name, entry in data["instances"].items():
        target = data["targets"][entry["target"]]
        out[name] = InstanceProfile(name, entry["target"], figure(entry["chips"]),
                                    figure(target["physical_cores_per_chip"]),
                                    figure(target["per_chip"]["hbm_capacity_bytes"]), entry["default_lnc"],
                                    tuple(entry["allowed_lnc"]), entry["confirmed"])
    return out


PROFILES: dict[str, InstanceProfile] = _profiles()


@dataclasses.dataclass(frozen=True)
class Topology:
    """What this process sees: the cores it may use and their capacity."""

    profile: InstanceProfile
    lnc: int
    device_count: int
    hbm_per_core: int
    default_device: int
    distributed: bool  # launched by torchrun with more than one rank per node

    @property
    def total_logical_cores(self) -> int:
        return self.profile.logical_cores(self.lnc)


def get_profile(name: str | None = None) -> InstanceProfile:
    """The profile called ``name``, else ``TORCHNEURON_INSTANCE``'s; the error names whichever was used."""
    given = f"instance {name!r}" if name else None
    name = name or settings.get_str("TORCHNEURON_INSTANCE")
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(
            f"{given or f'TORCHNEURON_INSTANCE={name!r}'} is not a known instance profile; "
            f"choose one of {', '.join(PROFILES)}"
        ) from None


def parse_core_list(text: str, limit: int) -> list[int]:
    """Parse NEURON_RT_VISIBLE_CORES: ``"3"``, ``"0-3"`` or ``"0,2,4-5"``."""
    cores: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                cores.extend(range(lo, hi + 1))
            else:
                cores.append(int(part))
    except ValueError:
        raise ConfigError(
            f"NEURON_RT_VISIBLE_CORES={text!r} is not a core list such as '0', '0-3' or '0,2'"
        ) from None
    bad = [c for c in cores if c < 0 or c >= limit]
    if bad:
        raise ConfigError(
            f"NEURON_RT_VISIBLE_CORES={text!r} names core(s) {bad}, but the instance has "
            f"{limit} logical cores (0..{limit - 1})"
        )
    return sorted(set(cores))


# The environment variables `resolve_topology` reads (and, under torchrun, writes).
TOPOLOGY_ENV = ("TORCHNEURON_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_RT_VISIBLE_CORES",
                "NEURON_RT_NUM_CORES", "LOCAL_WORLD_SIZE", "LOCAL_RANK")


def resolve_topology(profile: InstanceProfile | None = None) -> Topology:
    """Work out the cores of this process from the profile and the environment."""
    profile = profile or get_profile()
    lnc = settings.get_int("NEURON_LOGICAL_NC_CONFIG", profile.default_lnc)
    if lnc not in (1, 2):
        raise ConfigError(f"NEURON_LOGICAL_NC_CONFIG={lnc} is invalid: only 1 or 2 are supported")
    if lnc not in profile.allowed_lnc:
        raise ConfigError(
            f"NEURON_LOGICAL_NC_CONFIG={lnc} is not supported on {profile.name} "
            f"(allowed: {', '.join(map(str, profile.allowed_lnc))})"
        )
    total = profile.logical_cores(lnc)
    local_world = settings.get_int("LOCAL_WORLD_SIZE")
    local_rank = settings.get_int("LOCAL_RANK")
    if local_world is not None and local_rank is not None and local_world > 1:
        # torchrun: one logical core per process, indexed by the local rank.
        if local_world > total:
            raise ConfigError(
                f"{local_world} ranks per node but {profile.name} with LNC={lnc} has only "
                f"{total} logical NeuronCores; lower --nproc-per-node or choose a larger "
                "TORCHNEURON_INSTANCE"
            )
        os.environ.setdefault("NEURON_RT_VISIBLE_CORES", str(local_rank))
        return Topology(profile, lnc, local_world, profile.hbm_per_logical_core(lnc),
                        local_rank, True)
    visible = settings.get_str("NEURON_RT_VISIBLE_CORES")
    count = len(parse_core_list(visible, total)) if visible else total
    num_cores = settings.get_int("NEURON_RT_NUM_CORES")
    if num_cores:
        if num_cores > count:
            raise ConfigError(
                f"NEURON_RT_NUM_CORES={num_cores} asks for more cores than the {count} visible"
            )
        count = num_cores
    return Topology(profile, lnc, count, profile.hbm_per_logical_core(lnc), 0, False)


def default_topology() -> Topology:
    """The declared default instance with all its cores, read from no variable: the
    topology registered when the environment's one is unusable (its ``ConfigError``
    is then raised at the first device use, see ``neuron.defer_config_error``)."""
    profile = PROFILES[settings.setting("TORCHNEURON_INSTANCE").default]
    lnc = profile.default_lnc
    return Topology(profile, lnc, profile.logical_cores(lnc), profile.hbm_per_logical_core(lnc), 0, False)
