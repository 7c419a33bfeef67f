"""The Trainium figures a projection runs on, resolved for one logical core.

``hardware.json`` (the one hardware table, read through ``runtime/hardware_data.py``)
holds per-physical-core and per-chip figures with their sources; a logical core
(LNC=2 fuses two physical cores) gets ``lnc`` times the per-core peaks and its
share of the chip's HBM and DMA bandwidth. The instance profiles of
``runtime/profiles.py`` (read from the same table) say how many chips and cores
an instance has; this module adds what the hardware can do and what it costs.
"""
from __future__ import annotations

import dataclasses

import torch

from ..runtime.errors import ConfigError, DataFileError
from ..runtime.hardware_data import DATA_FILE, figure as _value, load_hardware_data as load_data
from ..runtime.settings import get_int
from ..runtime.profiles import InstanceProfile, get_profile
from .results import Price

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
LINKS = ("chip", "neuronlink", "efa")

_FP8 = {d for d in (getattr(torch, n, None) for n in (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")) if d is not None}


def tensor_dtype_class(dtype: torch.dtype) -> str:
    """The TensorE rate class of a dtype: ``bf16`` (also fp16), ``fp8`` or ``fp32``.

    Everything else runs at the FP32 rate: TensorE has no FP64, and 64-bit
    integers and floats are narrowed to 32 bits on the device.
    """
    if dtype in (torch.bfloat16, torch.float16):
        return "bf16"
    if dtype in _FP8:
        return "fp8"
    return "fp32"


@dataclasses.dataclass(frozen=True)
class DeviceModel:
    """What one logical NeuronCore of an instance can do, in base units (FLOP/s, B/s)."""

    instance: str
    target: str
    legacy: bool
    lnc: int
    chips: int
    logical_cores_per_chip: int
    tensor_flops: dict[str, float]  # by dtype class
    engine_elements_per_s: dict[str, float]  # vector, scalar, gpsimd: data-path width × clock
    hbm_bytes_per_s: float  # this core's share of the chip's HBM bandwidth
    dma_bytes_per_s: float  # this core's share of the chip's DMA bandwidth
    link_bytes_per_s: dict[str, float | None]  # chip (core to core), neuronlink (one link of the chip's), efa
    sbuf_bytes: int = 0  # on-chip state buffer (SBUF) of the logical core: what a graph can keep on chip

    @property
    def logical_cores(self) -> int:
        return self.chips * self.logical_cores_per_chip

    def tensor_peak(self, dtype: torch.dtype) -> float:
        return self.tensor_flops[tensor_dtype_class(dtype)]


def device_model(instance: str | InstanceProfile | None = None, lnc: int | None = None) -> DeviceModel:
    """The device model of ``instance`` (default: ``TORCHNEURON_INSTANCE``) at ``lnc``
    (default: ``NEURON_LOGICAL_NC_CONFIG``, else the profile's default)."""
    profile = instance if isinstance(instance, InstanceProfile) else get_profile(instance)
    data = load_data()
    entry = data["instances"].get(profile.name)
    if entry is None:
        raise DataFileError(f"no projection data for instance profile {profile.name!r}; "
                            f"add it to {DATA_FILE}")
    allowed = f"(allowed: {', '.join(map(str, profile.allowed_lnc))})"
    if lnc is None:
        lnc = get_int("NEURON_LOGICAL_NC_CONFIG", profile.default_lnc)
        if lnc not in profile.allowed_lnc:
            raise ConfigError(f"NEURON_LOGICAL_NC_CONFIG={lnc} is not supported on {profile.name} {allowed}")
    elif lnc not in profile.allowed_lnc:
        raise ValueError(f"LNC={lnc} is not supported on {profile.name} {allowed}")
    target = data["targets"][entry["target"]]
    core, chip = target["per_physical_core"], target["per_chip"]
    physical = profile.cores_per_chip  # read from the same table (runtime/profiles.py)
    share = lnc / physical  # one logical core's share of a chip
    return DeviceModel(
        instance=profile.name,
        target=entry["target"],
        legacy=target["legacy"],
        lnc=lnc,
        chips=profile.chips,
        logical_cores_per_chip=physical // lnc,
        tensor_flops={k: _value(v) * lnc for k, v in core["tensor_flops"].items()},
        engine_elements_per_s={e: _value(core["datapath_elements_per_cycle"][e]) * _value(core["clock_hz"][e]) * lnc
                               for e in ("vector", "scalar", "gpsimd")},
        hbm_bytes_per_s=_value(chip["hbm_bytes_per_s"]) * share,
        dma_bytes_per_s=_value(chip["dma_bytes_per_s"]) * share,
        link_bytes_per_s={
            "chip": _value(chip["core_to_core_bytes_per_s"]) * share,
            # a ring over the chips crosses each chip boundary over one of the chip's links
            "neuronlink": _value(chip["neuronlink_bytes_per_s"]) / _value(chip["neuronlink_links"]),
            "efa": _value(entry["efa_bytes_per_s"]),
        },
        sbuf_bytes=int(_value(target["nki"]["partitions"]) * _value(target["nki"]["sbuf_bytes_per_partition"])) * lnc,
    )


def price(instance: str | InstanceProfile | None = None, price_per_hour: float | None = None) -> Price:
    """The hourly price to project with and where it comes from: the one price lookup.

    A user's ``price_per_hour`` wins; otherwise the newest dated entry of the
    price table (third-party figures: the source says so). ``usd_per_hour``
    is ``None`` when neither exists.
    """
    name = instance.name if isinstance(instance, InstanceProfile) else get_profile(instance).name
    if price_per_hour is not None:
        if price_per_hour < 0:
            raise ValueError(f"price_per_hour={price_per_hour} must be >= 0")
        return Price(name, float(price_per_hour), "given by the user")
    prices = load_data()["instances"].get(name, {}).get("prices", [])
    if not prices:
        return Price(name, None, f"no price found for {name}; pass a price per hour")
    newest = max(prices, key=lambda p: p["date"])
    return Price(name, newest["usd_per_hour"], newest["source"], newest["date"], newest["region"])
