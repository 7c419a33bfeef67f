"""Efficiency factors, launch overheads and link latencies: the projection's knobs.

The defaults live in ``hardware.json`` (section ``defaults``) and are
assumptions. A calibration file, written by a user from one measured run on
real hardware, replaces any of them (schema in ``docs/projection.md``);
``TORCHNEURON_PROJECTION_CALIBRATION`` names one to load by default.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import warnings
from pathlib import Path

from ..runtime.errors import ConfigError
from ..runtime.settings import get_str
from .hardware import ENGINES, LINKS, load_data

CALIBRATION_SCHEMA = 1
# dma-class kernels use the dma bandwidth; "efa" (collectives between instances) defaults to "link"
EFFICIENCY_KEYS = ENGINES[:-1] + ("hbm", "dma", "link", "efa")
LAUNCH_KEYS = ("eager", "graph")
OP_OVERRIDE_KEYS = ("engine", "efficiency", "launch_seconds")
RETIRED_FIELDS = ("compile_seconds_per_graph",)  # older files: read, ignored, warned about once per load


class CalibrationError(ValueError):
    """A calibration file the projection cannot use; names the file and the field."""


@dataclasses.dataclass(frozen=True)
class Calibration:
    efficiency: dict[str, float]
    launch_seconds: dict[str, float]
    link_latency_seconds: dict[str, float]
    graph_engine_overlap: bool
    link_bytes_per_s: dict[str, float] = dataclasses.field(default_factory=dict)  # overrides the data
    ops: dict[str, dict] = dataclasses.field(default_factory=dict)  # per-op overrides
    # share of a graph's intermediate traffic (its eager kernels' bytes beyond its own I/O) still
    # moved to HBM; 0 = everything stays on chip. Fitted on published results (job.Factors).
    graph_spill_fraction: float = 0.0
    source: str = "defaults (assumptions; see docs/projection.md)"

    def op_override(self, op: str) -> dict:
        """The override of ``op`` by its exact name, else by its name without overload."""
        return self.ops.get(op) or self.ops.get(op.partition(".")[0], {})


def defaults() -> Calibration:
    d = copy.deepcopy(load_data()["defaults"])
    return Calibration(d["efficiency"], d["launch_seconds"], d["link_latency_seconds"], d["graph_engine_overlap"])


def _number(where: str, value, low: float, high: float | None, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CalibrationError(f"{where} must be a finite number, got {value!r}")
    too_low = value <= low if low_open else value < low
    if too_low or (high is not None and value > high):
        bound = f"in ({low}, {high}]" if low_open else f">= {low}" + (f" and <= {high}" if high else "")
        raise CalibrationError(f"{where} = {value} must be {bound}")
    return float(value)


def _table(where: str, raw, allowed: tuple[str, ...], low: float, high: float | None,
           low_open: bool = False) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise CalibrationError(f"{where} must be an object, got {type(raw).__name__}")
    unknown = set(raw) - set(allowed)
    if unknown:
        raise CalibrationError(f"{where} has unknown key(s) {sorted(unknown)}; allowed: {list(allowed)}")
    return {k: _number(f"{where}.{k}", v, low, high, low_open) for k, v in raw.items()}


def _op_overrides(where: str, raw) -> dict[str, dict]:
    if not isinstance(raw, dict):
        raise CalibrationError(f"{where} must be an object keyed by op name such as 'aten::mm'")
    ops = {}
    for op, entry in raw.items():
        if not isinstance(entry, dict) or set(entry) - set(OP_OVERRIDE_KEYS) or not entry:
            raise CalibrationError(f"{where}.{op} must be an object with some of {list(OP_OVERRIDE_KEYS)}")
        checked = {}
        if "engine" in entry:
            if entry["engine"] not in ENGINES:
                raise CalibrationError(
                    f"{where}.{op}.engine = {entry['engine']!r} is not one of {list(ENGINES)}")
            checked["engine"] = entry["engine"]
        if "efficiency" in entry:
            checked["efficiency"] = _number(f"{where}.{op}.efficiency", entry["efficiency"], 0, 1, True)
        if "launch_seconds" in entry:
            checked["launch_seconds"] = _number(f"{where}.{op}.launch_seconds", entry["launch_seconds"],
                                                0, None)
        ops[op] = checked
    return ops


def load_calibration(path: os.PathLike | str) -> Calibration:
    """Read a calibration file; fields it omits keep their defaults."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CalibrationError(f"cannot read calibration file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"calibration file {path} is not valid JSON: {e}") from None
    if not isinstance(raw, dict) or raw.get("schema") != CALIBRATION_SCHEMA:
        raise CalibrationError(
            f"calibration file {path} must be an object with \"schema\": {CALIBRATION_SCHEMA}")
    known = {"schema", "measured_on", "efficiency", "launch_seconds", "link_latency_seconds",
             "link_bytes_per_s", "graph_engine_overlap", "ops"}
    unknown = set(raw) - known - set(RETIRED_FIELDS)
    if unknown:
        raise CalibrationError(f"calibration file {path} has unknown field(s) {sorted(unknown)}")
    retired = sorted(set(raw) & set(RETIRED_FIELDS))
    if retired:
        warnings.warn(f"calibration file {path}: {', '.join(retired)} is ignored (compile time is the "
                      "compile_time model of hardware.json; docs/projection.md)", stacklevel=2)
    base = defaults()
    where = path.name
    overlap = raw.get("graph_engine_overlap", base.graph_engine_overlap)
    if not isinstance(overlap, bool):
        raise CalibrationError(f"{where}: graph_engine_overlap must be true or false")
    return Calibration(
        efficiency={**base.efficiency,
                    **_table(f"{where}: efficiency", raw.get("efficiency", {}), EFFICIENCY_KEYS, 0, 1, True)},
        launch_seconds={**base.launch_seconds,
                        **_table(f"{where}: launch_seconds", raw.get("launch_seconds", {}), LAUNCH_KEYS,
                                 0, None)},
        link_latency_seconds={**base.link_latency_seconds,
                              **_table(f"{where}: link_latency_seconds", raw.get("link_latency_seconds", {}),
                                       LINKS, 0, None)},
        graph_engine_overlap=overlap,
        link_bytes_per_s=_table(f"{where}: link_bytes_per_s", raw.get("link_bytes_per_s", {}), LINKS,
                                0, None, True),
        ops=_op_overrides(f"{where}: ops", raw.get("ops", {})),
        source=f"calibration file {path}"
        + (f" (measured on {raw['measured_on']})" if "measured_on" in raw else ""),
    )


def active_calibration() -> Calibration:
    """The calibration named by ``TORCHNEURON_PROJECTION_CALIBRATION``, else the defaults with
    the factors fitted on AWS's published results in force (``fitted_factors.json``): the plan,
    the pilot and ``metrics()`` then project with one set of factors, the one the error band
    (``projection.error_band``) was measured on.

    Read when a projector is first used, never at ``import torch``; a file it cannot
    use is a one-line ``ConfigError`` naming the variable."""
    path = get_str("TORCHNEURON_PROJECTION_CALIBRATION")
    if not path:
        from .job import fitted_factors  # job builds on this module
        return fitted_factors().calibration(defaults())
    try:
        return load_calibration(path)
    except CalibrationError as exc:
        raise ConfigError(f"TORCHNEURON_PROJECTION_CALIBRATION={path}: {exc}") from None
