"""Projected Trainium time and cost: a device model behind every kernel, graph and collective.

Nothing here is measured: every figure is a projection from the hardware data
in ``hardware.json`` and the calibration in force, labelled ``projected``.
See ``docs/projection.md`` for the model, its assumptions and its limits.
"""
from __future__ import annotations

import threading

from .calibration import Calibration, CalibrationError, active_calibration, defaults, load_calibration
from .compile_time import CompileModel, GraphProgram, compile_model, graph_compile_seconds, project_compile
from .collectives import COLLECTIVE_LOG, CollectiveLog, CollectiveRecord, collective_seconds, link_for_ranks
from .graph import GraphCost
from .hardware import DeviceModel, device_model, price
from .job import ErrorBand, Factors, error_band, fitted_factors
from .kernel import KernelCost, ProjectionError, engine_of
from .projector import Projector
from .recording import ProjectionMode
from .results import (LABEL, SECONDS_PER_HOUR, CompileProjection, CostProjection, Price, StepProjection,
                      WindowProjection)
from .trace import chrome_trace, write_chrome_trace

__all__ = [
    "COLLECTIVE_LOG", "LABEL", "SECONDS_PER_HOUR", "Calibration", "CalibrationError", "CollectiveLog",
    "ErrorBand", "Factors", "error_band", "fitted_factors",
    "CollectiveRecord", "CompileModel", "CompileProjection", "CostProjection", "DeviceModel",
    "GraphCost", "GraphProgram", "KernelCost", "Price", "StepProjection", "WindowProjection", "compile_model",
    "graph_compile_seconds", "project_compile",
    "ProjectionError", "ProjectionMode", "Projector", "active_calibration", "chrome_trace",
    "collective_seconds", "configure", "defaults", "device_model", "engine_of", "get_projector", "link_for_ranks",
    "load_calibration", "price", "reset", "snapshot", "target", "write_chrome_trace",
]

_default: Projector | None = None
_target: tuple = (None, None)  # (instance, lnc) of the process's projector, built at first use
_default_lock = threading.Lock()


def get_projector() -> Projector:
    """The process's projector (instance, LNC and calibration from the environment),
    the one the eager accounting and the compile backend feed. Built at first use, so
    a calibration file it cannot read is raised here, never at ``import torch``."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Projector(*_target)
        return _default


def configure(instance=None, lnc: int | None = None) -> None:
    """Make the process's projector one for ``instance`` (a name or profile) at ``lnc``
    (``torch_neuronx.reconfigure`` switches target); what the old one projected is dropped.
    The projector itself is built at first use (:func:`get_projector`)."""
    global _default, _target
    with _default_lock:
        _default, _target = None, (instance, lnc)


def target() -> tuple[str | None, int | None]:
    """The instance name and LNC :func:`configure` chose, without building the projector."""
    instance, lnc = _target
    return getattr(instance, "name", instance), lnc


def snapshot(**kwargs) -> dict:
    """``get_projector().snapshot(...)``: the JSON-serialisable projection for ``metrics()``
    and the pilot report (arguments as ``Projector.snapshot``; ``collectives`` defaults
    to what this process's ``neuron`` process groups ran)."""
    kwargs.setdefault("collectives", dict(COLLECTIVE_LOG.counts))
    return get_projector().snapshot(**kwargs)


def reset() -> None:
    """Forget projected signatures, graphs and recorded collectives (with the rest of the metrics)."""
    COLLECTIVE_LOG.clear()
    with _default_lock:
        if _default is not None:
            _default.reset()
