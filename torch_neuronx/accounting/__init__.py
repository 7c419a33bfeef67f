"""Kernel-compilation accounting: what the real product would compile and cache per
kernel signature, the ops it runs on the host, and the ``metrics()`` snapshot.
See ``docs/fidelity.md``.

``install`` runs once from ``torch_neuronx._register``; the functions below
are re-exported as ``torch_neuronx.<name>``.
"""
from __future__ import annotations

import atexit

from ..runtime.extension import _C
from ..runtime import log, settings
from . import kernel_key as _kernel_key
from . import listeners as _listeners
from . import metrics_snapshot as _metrics
from . import projected as _projected
from .signatures import Accounting, compiler_config, enabled_from_env, make_accounting, salt_of
from .listeners import add_signature_listener, remove_signature_listener
from .neff_cache import NeffCache

__all__ = [
    "add_metrics_section", "add_signature_listener", "clear_op_tracking", "export_metrics",
    "get_executed_ops", "get_fallback_ops", "get_host_ops", "kernel_accounting_enabled", "metrics",
    "remove_signature_listener", "reset_metrics", "set_host_ops",
    "set_kernel_accounting", "use_neff_cache",
]

_accounting: Accounting | None = None
_enabled = False


def install(topology) -> None:
    global _accounting
    log.configure()
    _accounting = make_accounting(topology.profile.family, topology.lnc)
    _kernel_key.install()
    _C._set_signature_callback(_keep_dynamo_out(_on_new_signature))
    set_kernel_accounting(enabled_from_env())
    _metrics.register_sources(lambda: _accounting)
    _projected.install(topology)
    metrics_dir = settings.get_str("TORCH_NEURONX_METRICS_DIR")
    if metrics_dir is not None:
        atexit.register(_export_at_exit, metrics_dir)


def reconfigure(topology) -> None:
    """Account for another target: the compiler configuration, and so the salt of
    every kernel signature, follows the instance family and LNC of ``topology``."""
    _accounting.config = compiler_config(topology.profile.family, topology.lnc)
    set_kernel_accounting(_enabled)
    _projected.reconfigure(topology)


def _keep_dynamo_out(callback):
    """Mark ``callback`` so that Dynamo never traces it or anything it calls, and return it.

    C++ calls it while an eager op runs, and an eager op can run inside a compiled function
    (the instruction a graph breaks on): with Dynamo's frame hook active, the callback was a new
    frame to Dynamo, compiled once per op name up to its recompile limit, listeners included
    (each new signature recompiled the function). PyTorch keeps Dynamo out of the Python kernels the dispatcher calls the same way
    (``torch._library.custom_ops`` wraps them in ``torch._disable_dynamo``), but that wrapper
    imports ``torch._dynamo`` (about 2 s) on the first new signature of every process, eager
    ones included. Instead the callback's code object gets the execution strategy Dynamo's own
    ``torch.compiler.disable`` amounts to: skip this frame, and run every frame it calls with the
    frame hook off. Set once, in C; no wrapper, nothing on the signature path, no Dynamo import.
    """
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    set_code_exec_strategy(callback.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))
    return callback


def _on_new_signature(op: str, key: str, description: str, args: tuple) -> None:
    """C++ calls this once per signature new to the process: count it, then
    tell the listeners (accounting/listeners.py)."""
    _accounting.on_new_signature(op, key, description)
    _listeners.notify(op, key, args)


def _export_at_exit(directory) -> None:
    try:
        export_metrics(directory)
    except OSError as exc:
        log.get_logger("metrics").warning("metrics not exported to %s: %s", directory, exc)


def use_neff_cache(directory) -> None:
    """Account against another cache directory (``None``: no persistent cache)
    and forget what this process compiled, as a fresh process would. Counters
    and op lists restart; for tools and tests that compare runs in one process."""
    global _accounting
    cache = None if directory is None else NeffCache(directory)
    _accounting = Accounting(cache, _accounting.config, _accounting.tracker)
    _C._reset_accounting()
    _accounting.tracker.clear()


def active_neff_cache() -> NeffCache | None:
    """The persistent NEFF cache kernels are accounted against; compiled graphs
    share it, as on Trainium ("Eager and compiled NEFFs share the same in-memory and disk
    caches": TR ``neuron_dynamo_backend/compile.py:97-113`` keys a graph into the eager caches)."""
    return _accounting.cache


def set_kernel_accounting(enabled: bool) -> None:
    """Turn signature hashing, cache lookups and op tracking on or off."""
    global _enabled
    _enabled = bool(enabled)
    _C._set_accounting(_enabled, salt_of(_accounting.config))


def kernel_accounting_enabled() -> bool:
    return _enabled


def get_executed_ops() -> list[str]:
    """ATen ops run on the device since the last clear (needs accounting on)."""
    return sorted(_accounting.tracker.executed)


def get_fallback_ops() -> list[str]:
    """Executed ops that the real product runs on the host CPU."""
    return sorted(_accounting.tracker.fallbacks)


def clear_op_tracking() -> None:
    _accounting.tracker.clear()
    _C._forget_signatures()


def set_host_ops(names) -> None:
    """Replace the list of ops reported as host (CPU) fallbacks."""
    _accounting.tracker.set_host_ops(names)


def get_host_ops() -> tuple[str, ...]:
    return _accounting.tracker.host_ops


def metrics() -> dict:
    """A snapshot of kernels, estimated compile time, cache, memory and ops, and the
    projected device time of the same run (``projection``)."""
    data = _metrics.snapshot(_accounting, _enabled)
    data["projection"] = _projected.section()
    return data


def add_metrics_section(name: str, read, reset) -> None:
    """Let a higher layer add a section to ``metrics()`` (see ``accounting/metrics_snapshot.py``)."""
    _metrics.add_section(name, read, reset)


def reset_metrics() -> None:
    """Zero the counters, op lists and memory peaks; caches stay warm."""
    _metrics.reset(_accounting)
    _projected.reset()


def export_metrics(directory):
    """Write the snapshot as JSON and per-op CSV; returns both paths."""
    return _metrics.export(metrics(), directory)
