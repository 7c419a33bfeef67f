"""The state of one kernel launch: target limits, SPMD position, on-chip usage, cost.

SPMD programs of a grid run one after another on the host; SBUF and PSUM are
per program (each program is one kernel instance on a core), the cost adds up.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import threading

from . import hardware
from .cost import CostModel, Estimate
from .errors import NkiValidationError

_local = threading.local()


class KernelRun:
    def __init__(self, kernel_name: str, grid: tuple[int, ...], target: str | None = None):
        self.kernel_name = kernel_name
        self.grid = grid
        self.target = target or hardware.current_target()
        self.limits = hardware.limits(self.target)
        self.cost = CostModel(self.limits)
        self.program: tuple[int, ...] = ()
        self.sbuf_bytes = 0
        self.sbuf_peak = 0
        self.psum_banks = 0
        self.psum_peak_banks = 0
        self.shared_hbm: list = []  # allocations every program shares, in allocation order
        self._shared_index = 0
        self.accumulator = None  # ScalarE reduce registers, one per partition

    # -- on-chip capacity -------------------------------------------------
    def charge_sbuf(self, nbytes: int, what: str) -> None:
        capacity = int(self.limits["sbuf_bytes_per_partition"])
        if self.sbuf_bytes + nbytes > capacity:
            raise NkiValidationError(
                f"SBUF overflow in kernel {self.kernel_name!r} on {self.target}: allocating {what} "
                f"({nbytes} B per partition) with {self.sbuf_bytes} B live needs "
                f"{self.sbuf_bytes + nbytes} B per partition, but a partition holds {capacity} B. "
                "Use smaller tiles, free tiles you no longer need (allocate them inside the loop "
                "body) or keep the data in HBM and stream it in tiles.")
        self.sbuf_bytes += nbytes
        self.sbuf_peak = max(self.sbuf_peak, self.sbuf_bytes)

    def charge_psum(self, nbytes: int, what: str) -> int:
        bank = int(self.limits["psum_bank_bytes"])
        widest = int(self.limits["psum_tile_max_bytes"])
        if nbytes > widest:
            raise NkiValidationError(
                f"PSUM tile too wide in kernel {self.kernel_name!r} on {self.target}: {what} needs "
                f"{nbytes} B per partition, but a PSUM tile holds at most {widest} B per partition "
                f"({widest // 4} fp32, nl.tile_size.psum_bank_fmax). Split the free dimension into "
                "tiles of that size.")
        banks = math.ceil(nbytes / bank)
        total = int(self.limits["psum_banks"])
        if self.psum_banks + banks > total:
            raise NkiValidationError(
                f"PSUM overflow in kernel {self.kernel_name!r} on {self.target}: {what} needs {banks} "
                f"bank(s) but {self.psum_banks} of the {total} banks ({bank} B per partition each) are "
                "live. Copy finished accumulations to SBUF and let their PSUM tiles go.")
        self.psum_banks += banks
        self.psum_peak_banks = max(self.psum_peak_banks, self.psum_banks)
        return banks

    def shared_allocation(self, make):
        """Program 0 allocates a shared_hbm tensor; the other programs get the same one."""
        if self._shared_index < len(self.shared_hbm):
            alloc = self.shared_hbm[self._shared_index]
        else:
            alloc = make()
            self.shared_hbm.append(alloc)
        self._shared_index += 1
        return alloc

    def programs(self):
        for index in itertools.product(*(range(n) for n in self.grid)):
            self.program = index
            self._shared_index = 0
            yield index

    def estimate(self) -> Estimate:
        return Estimate(self.target, dict(self.cost.engine_s), dict(self.cost.instructions),
                        self.cost.dma_bytes, self.sbuf_peak,
                        self.psum_peak_banks * int(self.limits["psum_bank_bytes"]),
                        math.prod(self.grid) if self.grid else 1)


def current() -> KernelRun:
    run = getattr(_local, "run", None)
    if run is None:
        raise RuntimeError("NKI language and ISA calls run only inside a kernel launched through "
                           "@nki.jit or nki.simulate")
    return run


@contextlib.contextmanager
def running(run: KernelRun):
    previous = getattr(_local, "run", None)
    _local.run = run
    try:
        yield run
    finally:
        _local.run = previous
