"""Running a CPU-compiled graph on device memory without copying it.

Inputs become CPU aliases of their neuron storage; outputs the generated code
allocated on the host are adopted as neuron memory (charged to the core they
belong to). Outputs that share memory keep sharing it, and an output that is
(a view of) an input comes back as a view of that neuron input.

Both directions run in C++ (``csrc/runtime/GraphInputs.cpp``), one call per
direction: a decode step passes every parameter and every static-cache tensor,
and mapping them one by one in Python cost as much as the step itself. Each
graph keeps the alias of each input position and reuses it while the position
holds the same memory with the same layout, so a warm step builds aliases only
for the tensors that are new (the token ids, the cache positions).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

from ..runtime.extension import _C
from .dynamo_metrics import METRICS


def input_alias_counts(reset: bool = False) -> dict[str, int]:
    """``{"built": n, "reused": m}``: input aliases compiled graphs built and reused since the
    last reset (host bookkeeping, not device work)."""
    return dict(_C._graph_input_aliases(reset))


def alias_runner(
    compiled: Callable[[list], Sequence[Any]],
    devices: Sequence[torch.device | None],
    executed: Callable[[int], None] = lambda issued_ns: None,
    lazy_views: Sequence[int] = (),
) -> Callable[[list], list]:
    """A boxed callable running ``compiled`` (CPU code) on neuron arguments;
    ``devices`` are its outputs' devices (None: not a tensor); ``executed(issued_ns)`` is
    called after each run with the time it began (the projection counts graph runs, a
    profiler places them on the device timeline). The outputs at
    ``lazy_views`` (a complex conjugate or negation left as a view bit: a forward
    saving ``_conj`` for its backward) are materialized first: adoption keeps the
    memory, not the bit."""
    inputs = _C._GraphInputs(list(devices))

    def run(args: list) -> list:
        start, issued_ns = time.perf_counter(), time.time_ns()
        cpu_args, call = inputs.alias(args)  # `call` holds the neuron inputs until the end
        args.clear()
        outputs = compiled(cpu_args)
        if lazy_views:
            outputs = list(outputs)
        for i in lazy_views:
            outputs[i] = outputs[i].resolve_conj().resolve_neg()
        result = call.results(outputs)
        METRICS.add_execution(time.perf_counter() - start)
        executed(issued_ns)
        return result

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
