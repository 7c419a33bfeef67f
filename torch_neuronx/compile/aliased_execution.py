"""Running a CPU-compiled graph on device memory without copying it.

Inputs become CPU aliases of their neuron storage; outputs the generated code
allocated on the host are adopted as neuron memory (charged to the core they
belong to). Outputs that share memory keep sharing it, and an output that is
(a view of) an input comes back as a view of that neuron input.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

from .. import _C
from .metrics import METRICS


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _OutputMapper:
    """Maps one call's CPU outputs back to the devices the graph promised."""

    def __init__(self, neuron_inputs: Sequence[Any]):
        self._views_of: dict[int, torch.Tensor] = {
            _storage_key(x): x
            for x in neuron_inputs
            if isinstance(x, torch.Tensor) and x.device.type == "neuron" and x.untyped_storage().nbytes()
        }

    def __call__(self, out: Any, device: torch.device | None) -> Any:
        if not isinstance(out, torch.Tensor) or device is None:
            return out
        base = self._views_of.get(_storage_key(out)) if out.untyped_storage().nbytes() else None
        if device.type != "neuron":
            # A CPU result must never alias device memory (``x.cpu()`` copies).
            return out.clone() if base is not None else out
        if base is not None and base.dtype == out.dtype:
            return base.as_strided(out.shape, out.stride(), out.storage_offset())
        adopted = _C._adopt_cpu_tensor(out, device.index if device.index is not None else 0)
        if out.untyped_storage().nbytes():
            self._views_of[_storage_key(out)] = adopted
        return adopted


def alias_runner(
    compiled: Callable[[list], Sequence[Any]],
    devices: Sequence[torch.device | None],
    executed: Callable[[], None] = lambda: None,
) -> Callable[[list], list]:
    """A boxed callable running ``compiled`` (CPU code) on neuron arguments;
    ``executed()`` is called after each run (the projection counts graph runs)."""

    def run(args: list) -> list:
        start = time.perf_counter()
        mapper = _OutputMapper(args)
        cpu_args = [_C._cpu_alias(a) if isinstance(a, torch.Tensor) else a for a in args]
        args.clear()
        outs = compiled(cpu_args)
        result = [mapper(o, d) for o, d in zip(outs, devices)]
        METRICS.add_execution(time.perf_counter() - start)
        executed()
        return result

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
