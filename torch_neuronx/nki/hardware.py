"""The NeuronCore limits NKI kernels meet, per target, in one plain table.

Every figure carries its source so the lead can fold this table into the
projection's hardware data file; read it only through :func:`limits`.
Sources: ``RESEARCH`` is ``shared/research/trainium-hardware-perf-models-nki.md``
section 2 (which cites the Neuron architecture docs) and section 4 (NKI).
"""
from __future__ import annotations

from ..runtime.settings import get_str

_KIB = 1024
_GB = 1e9

# figure: (value, citation)
_TABLE: dict[str, dict[str, tuple[float, str]]] = {
    "trn1": {
        "partitions": (128, "RESEARCH §4, nl.tile_size.pmax; trainium_inferentia2_arch.rst"),
        "sbuf_bytes_per_partition": (192 * _KIB, "RESEARCH §2: 24 MiB = 128 x 192 KiB"),
        "psum_banks": (8, "RESEARCH §2: 2 MiB = 128 x 16 KiB, a bank holds 512 fp32"),
        "psum_bank_bytes": (2 * _KIB, "RESEARCH §2: 512 fp32 per partition per bank"),
        "psum_tile_max_bytes": (2 * _KIB, "nc_matmul docstring: a matmul result fits one PSUM bank before NeuronCore-v4"),
        "gemm_stationary_fmax": (128, "RESEARCH §4: stationary K<=128, M<=128"),
        "gemm_moving_fmax": (512, "RESEARCH §4: moving K<=128, N<=512"),
        "tensor_hz": (2.8e9, "RESEARCH §2: TensorE clock"),
        "vector_hz": (1.12e9, "RESEARCH §2: Vector clock"),
        "scalar_hz": (1.4e9, "RESEARCH §2: Scalar clock"),
        "gpsimd_hz": (1.4e9, "RESEARCH §2: GpSimd clock"),
        "dma_bytes_per_s": (820 * _GB / 2, "RESEARCH §2: HBM 820 GB/s per chip / 2 cores (derived)"),
    },
    "trn2": {
        "partitions": (128, "RESEARCH §4, nl.tile_size.pmax; trainium2_arch.rst"),
        "sbuf_bytes_per_partition": (224 * _KIB, "RESEARCH §2: 28 MiB = 128 x 224 KiB"),
        "psum_banks": (8, "RESEARCH §2: PSUM 2 MiB per core"),
        "psum_bank_bytes": (2 * _KIB, "RESEARCH §2: 512 fp32 per partition per bank"),
        "psum_tile_max_bytes": (2 * _KIB, "nc_matmul docstring: a matmul result fits one PSUM bank before NeuronCore-v4"),
        "gemm_stationary_fmax": (128, "RESEARCH §4: stationary K<=128, M<=128"),
        "gemm_moving_fmax": (512, "RESEARCH §4: moving K<=128, N<=512"),
        "tensor_hz": (2.4e9, "RESEARCH §2: TensorE clock"),
        "vector_hz": (0.96e9, "RESEARCH §2: Vector clock"),
        "scalar_hz": (1.2e9, "RESEARCH §2: Scalar clock"),
        "gpsimd_hz": (1.2e9, "RESEARCH §2: GpSimd clock"),
        "dma_bytes_per_s": (2.9e12 / 8, "RESEARCH §2: HBM 2.9 TB/s per chip / 8 physical cores (derived)"),
    },
    "trn3": {
        "partitions": (128, "RESEARCH §4, nl.tile_size.pmax"),
        "sbuf_bytes_per_partition": (256 * _KIB, "RESEARCH §2: 32 MiB / 128 partitions (derived)"),
        "psum_banks": (8, "RESEARCH §2: PSUM 2 MiB per core"),
        "psum_bank_bytes": (2 * _KIB, "RESEARCH §2: 512 fp32 per partition per bank"),
        "psum_tile_max_bytes": (16 * _KIB, "nc_matmul docstring: from NeuronCore-v4 a result may span all 8 PSUM banks"),
        "gemm_stationary_fmax": (128, "RESEARCH §4: stationary K<=128, M<=128"),
        "gemm_moving_fmax": (4096, "nc_matmul docstring: NeuronCore-v4 moving free size up to 4096 (fp32 dst)"),
        "tensor_hz": (2.4e9, "RESEARCH §2: TensorE clock"),
        "vector_hz": (1.2e9, "RESEARCH §2: Vector clock"),
        "scalar_hz": (1.2e9, "RESEARCH §2: Scalar clock"),
        "gpsimd_hz": (1.2e9, "RESEARCH §2: GpSimd clock"),
        "dma_bytes_per_s": (4.9e12 / 8, "RESEARCH §2: HBM 4.9 TB/s per chip / 8 physical cores (derived)"),
    },
}

_ALIASES = {"gen2": "trn1", "gen3": "trn2", "gen4": "trn3"}


def current_target() -> str:
    """``NEURON_PLATFORM_TARGET_OVERRIDE`` if set, else the instance profile's family."""
    override = (get_str("NEURON_PLATFORM_TARGET_OVERRIDE") or "").lower()
    if override:
        if _ALIASES.get(override, override) not in _TABLE:
            raise ValueError(
                f"NEURON_PLATFORM_TARGET_OVERRIDE={override!r} is not a NKI target; "
                f"use one of {sorted(_TABLE) + sorted(_ALIASES)}")
        return _ALIASES.get(override, override)
    from ..runtime.profiles import get_profile

    family = get_profile().family.lower()  # what get_device_properties(0).name reports
    for target in _TABLE:
        if family.startswith(target):
            return target
    raise ValueError(f"instance family {family!r} has no NKI target; set NEURON_PLATFORM_TARGET_OVERRIDE")


def resolve_target(target: str | None) -> str:
    """``trn1/trn2/trn3`` (or ``gen2/3/4``), default :func:`current_target`."""
    if not target:
        return current_target()
    target = _ALIASES.get(target, target)
    if target not in _TABLE:
        raise ValueError(f"unknown NKI target {target!r}; known: {sorted(_TABLE) + sorted(_ALIASES)}")
    return target


def limits(target: str | None = None) -> dict[str, float]:
    """The figures of ``target`` (default: :func:`current_target`), without citations."""
    target = resolve_target(target)
    return {name: value for name, (value, _) in _TABLE[target].items()}


def citation(target: str, figure: str) -> str:
    return _TABLE[resolve_target(target)][figure][1]
