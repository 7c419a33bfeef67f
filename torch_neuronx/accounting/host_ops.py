"""Ops that run on the host CPU on the real product, and op tracking.

TorchNeuron registers linear-algebra decompositions to run on the CPU and
copy the result back; its boxed fallback logs "Operator 'X' fell back to CPU"
once per op. Here every op runs on the host, so we report as fallbacks exactly
the ops the real product would run there, so the pilot can flag them.

Names are matched after normalising away the spellings PyTorch uses for one
decomposition at different dispatch levels: ``aten::`` and the overload,
leading underscores, a ``linalg_`` prefix and an ``_ex`` suffix, so that
``svd`` covers ``aten::_linalg_svd`` and ``cholesky`` covers
``aten::linalg_cholesky_ex``.
"""
from __future__ import annotations

from ..runtime import settings
from ..runtime.log import get_logger

DEFAULT_HOST_OPS = (
    "linalg_qr",
    "linalg_svd",
    "linalg_eigh",
    "linalg_eig",
    "cholesky",
    "cholesky_inverse",
    "linalg_inv_ex",
    "linalg_lu_factor_ex",
    "linalg_ldl_factor_ex",
    "slogdet",
    "det",
    "triangular_solve",
)

_log = get_logger("fallback")


def normalize(op_name: str) -> str:
    base = op_name.split("::", 1)[-1].split(".", 1)[0].lstrip("_")
    if base.startswith("linalg_"):
        base = base[len("linalg_"):]
    if base.endswith("_ex"):
        base = base[: -len("_ex")]
    return base


class OpTracker:
    """Executed ops and host fallbacks since the last clear; warns once per op."""

    def __init__(self, host_ops: tuple[str, ...]):
        self.set_host_ops(host_ops)
        self.executed: set[str] = set()
        self.fallbacks: set[str] = set()
        self._warned: set[str] = set()

    def set_host_ops(self, names) -> None:
        self.host_ops = tuple(names)
        self._host_keys = {normalize(n) for n in self.host_ops}

    def note(self, op_name: str) -> bool:
        """Record an executed op; True if it is a host (CPU) fallback."""
        self.executed.add(op_name)
        if normalize(op_name) not in self._host_keys:
            return False
        self.fallbacks.add(op_name)
        if op_name not in self._warned:
            self._warned.add(op_name)
            _log.warning(
                "Operator '%s' fell back to CPU: on Trainium it runs on the host and its "
                "result is copied back to the device", op_name)
        return True

    def clear(self) -> None:
        self.executed.clear()
        self.fallbacks.clear()


def host_ops_from_env() -> tuple[str, ...]:
    return settings.get_list("TORCHNEURON_HOST_OPS", DEFAULT_HOST_OPS)
