"""Estimated kernel time from AWS's published per-instruction cost rules.

A *projection*, not a measurement. The rules (AWS's NKI architecture guide,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/architecture/trainium_inferentia2_arch.html)
and how they are applied:

- TensorE matmul: ``max(N, 64)`` cycles, N the moving free size; fp32 inputs 4x.
- VectorE: N cycles per input tile (N elements per partition), plus a static
  overhead of 100 cycles per instruction.
- ScalarE: N cycles plus the same static overhead; reading the accumulation
  registers out (``reduce_res``) adds 64 cycles.
- GpSimd: N cycles plus the static overhead.
- DMA: bytes moved / the per-core HBM bandwidth; no fixed latency.

Engines run concurrently, so ``bound_s`` (the busiest engine) is the estimate
when the kernel overlaps its work perfectly and ``serial_s`` (the sum) when
nothing overlaps; the real time lies between them.
"""
from __future__ import annotations

import dataclasses

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
STATIC_OVERHEAD_CYCLES = 100
MATMUL_MIN_CYCLES = 64
FP32_MATMUL_FACTOR = 4
ACCUMULATOR_READ_CYCLES = 64


@dataclasses.dataclass
class Estimate:
    """Per-engine busy time of one kernel call (a projection for ``target``)."""

    target: str
    engine_s: dict[str, float]
    instructions: dict[str, int]
    dma_bytes: int
    sbuf_peak_bytes: int  # per partition
    psum_peak_bytes: int  # per partition
    programs: int
    kind: str = "projection"

    @property
    def bound_s(self) -> float:
        return max(self.engine_s.values())

    @property
    def serial_s(self) -> float:
        return sum(self.engine_s.values())

    def __str__(self) -> str:
        rows = [f"NKI kernel estimate ({self.kind}, {self.target}, {self.programs} program(s)): "
                f"{self.bound_s * 1e6:.2f} us if engines overlap, {self.serial_s * 1e6:.2f} us serial"]
        for engine in ENGINES:
            rows.append(f"  {engine:<7} {self.engine_s[engine] * 1e6:10.2f} us  "
                        f"{self.instructions[engine]:6d} instructions")
        rows.append(f"  peak SBUF {self.sbuf_peak_bytes} B/partition, peak PSUM {self.psum_peak_bytes} B/partition, "
                    f"DMA {self.dma_bytes} B")
        return "\n".join(rows)


class CostModel:
    """Accumulates engine cycles as instructions run."""

    def __init__(self, limits: dict[str, float]):
        self.limits = limits
        self.engine_s = dict.fromkeys(ENGINES, 0.0)
        self.instructions = dict.fromkeys(ENGINES, 0)
        self.dma_bytes = 0

    def _cycles(self, engine: str, cycles: float) -> None:
        self.engine_s[engine] += cycles / self.limits[f"{engine}_hz"]
        self.instructions[engine] += 1

    def matmul(self, moving_free: int, fp32_inputs: bool) -> None:
        cycles = max(moving_free, MATMUL_MIN_CYCLES)
        self._cycles("tensor", cycles * (FP32_MATMUL_FACTOR if fp32_inputs else 1))

    def elementwise(self, engine: str, per_partition: int, inputs: int = 1, reads_accumulator: bool = False) -> None:
        cycles = per_partition * max(inputs, 1) + STATIC_OVERHEAD_CYCLES
        self._cycles(engine, cycles + (ACCUMULATOR_READ_CYCLES if reads_accumulator else 0))

    def dma(self, nbytes: int) -> None:
        self.engine_s["dma"] += nbytes / self.limits["dma_bytes_per_s"]
        self.instructions["dma"] += 1
        self.dma_bytes += nbytes
