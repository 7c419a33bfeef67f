"""The versioned schema of ``report.json`` (documented in docs/pilot.md): typed sections and their JSON.

The runner fills a :class:`Report` (typed sections; each step's result is the
step's own dataclass) and :func:`to_json_text` is the one place that turns it
into JSON. Bump ``SCHEMA_VERSION``'s major number when a key is removed or
changes meaning, the minor number when keys or values are added.
:func:`validate_report` checks the parts every consumer relies on; the text is
also checked to be strict JSON (no ``NaN``), so a report on disk always conforms.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from ...runtime.exit_codes import ExitCode

SCHEMA_NAME = "torchneuron-pilot-report"
SCHEMA_VERSION = "1.4"  # 1.1: status/kind "interrupted", kind "bad_tokenizer", inputs.tokenizer_note;
# 1.2: projected figures (performance, cost.projected), environment.instance.price;
# 1.3: error_band / ttft_error_band {relative, basis} beside every projected figure;
# 1.4: error kind "configuration" (an environment variable the run cannot use)

# The migration procedure's order; also the order of the HTML sections.
STEP_ORDER = ("inputs", "numerics", "quality", "finetune", "checkpoint", "compilation", "performance", "cost")
STEP_STATUSES = ("passed", "failed", "error", "skipped", "not_available", "not_run")
REPORT_STATUSES = ("passed", "failed", "error", "interrupted")
ERROR_KINDS = ("bad_input", "configuration", "not_causal_lm", "bad_tokenizer", "out_of_memory", "unsupported_dtype",
               "device_unavailable", "interrupted")


class ReportSchemaError(ValueError):
    """A report does not follow the schema."""


@dataclasses.dataclass
class Check:
    """One named pass/fail verdict with the measured value and the limit it was held to."""

    name: str
    passed: bool
    value: Any = None
    limit: Any = None
    detail: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "passed": bool(self.passed), "value": self.value, "limit": self.limit,
                "detail": self.detail}


@dataclasses.dataclass
class StepSection:
    """One step's section: status, time, summary, checks and the step's typed result."""

    title: str
    status: str = "not_run"
    seconds: float = 0.0
    summary: str = ""
    checks: list[Check] = dataclasses.field(default_factory=list)
    result: Any = None  # the step's result dataclass (``to_data()`` gives its JSON data)
    errors: list[dict] = dataclasses.field(default_factory=list)

    @property
    def data(self) -> dict:
        data = self.result.to_data() if self.result is not None else {}
        if self.errors:
            data["errors"] = list(self.errors)
        return data

    def to_json(self) -> dict:
        return {"title": self.title, "status": self.status, "seconds": self.seconds, "summary": self.summary,
                "checks": [c.to_json() for c in self.checks], "data": self.data}


@dataclasses.dataclass
class ReportError:
    kind: str
    message: str
    step: str | None = None
    traceback: str | None = None

    def to_json(self) -> dict:
        data = {"kind": self.kind, "message": self.message, "step": self.step}
        if self.traceback:
            data["traceback"] = self.traceback
        return data


@dataclasses.dataclass
class Environment:
    device: str
    device_type: str
    emulated: bool = False
    time_basis: str = "not measured"
    instance: dict | None = None
    host: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Report:
    created_utc: str
    tool: dict
    environment: Environment
    config: dict
    steps: dict[str, StepSection]
    status: str = "error"
    exit_code: int = ExitCode.INTERNAL_ERROR
    error: ReportError | None = None
    model: dict | None = None
    duration_seconds: float = 0.0

    def summary(self) -> dict:
        all_checks = [(n, c) for n, s in self.steps.items() for c in s.checks]
        return {"checks_total": len(all_checks), "checks_passed": sum(bool(c.passed) for _, c in all_checks),
                "failed_checks": [f"{n}: {c.name}" for n, c in all_checks if not c.passed]}

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "status": self.status,
            "exit_code": self.exit_code, "error": self.error.to_json() if self.error else None,
            "created_utc": self.created_utc, "duration_seconds": self.duration_seconds, "tool": self.tool,
            "environment": dataclasses.asdict(self.environment), "config": self.config, "model": self.model,
            "steps": {name: self.steps[name].to_json() for name in STEP_ORDER}, "summary": self.summary(),
        }


def finite_or_none(value):
    """JSON has no NaN or infinity: a non-finite measurement is recorded as null (its check fails)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def to_json_text(report: Report | dict) -> str:
    """The validated, strict-JSON text of ``report`` (raises :class:`ReportSchemaError`)."""
    data = finite_or_none(report.to_json() if isinstance(report, Report) else report)
    validate_report(data)
    try:
        return json.dumps(data, indent=2, allow_nan=False, default=str)
    except ValueError as exc:
        raise ReportSchemaError(f"report is not strict JSON: {exc}") from None


_TOP = {
    "schema": str, "schema_version": str, "status": str, "exit_code": int, "error": (dict, type(None)),
    "created_utc": str, "duration_seconds": (int, float), "tool": dict, "environment": dict,
    "config": dict, "model": (dict, type(None)), "steps": dict, "summary": dict,
}
_STEP = {"title": str, "status": str, "seconds": (int, float), "summary": str, "checks": list, "data": dict}
_CHECK = {"name": str, "passed": bool, "detail": str}
_ENV = {"device": str, "device_type": str, "emulated": bool, "time_basis": str}
_SUMMARY = {"checks_total": int, "checks_passed": int, "failed_checks": list}


def _require(obj: dict, spec: dict, where: str) -> None:
    for key, typ in spec.items():
        if key not in obj:
            raise ReportSchemaError(f"{where}: missing key {key!r}")
        if not isinstance(obj[key], typ) or (typ is int and isinstance(obj[key], bool)):
            raise ReportSchemaError(f"{where}.{key}: expected {typ}, got {type(obj[key]).__name__}")


def validate_report(report: dict) -> None:
    """Raise :class:`ReportSchemaError` unless ``report`` follows schema ``SCHEMA_VERSION``."""
    _require(report, _TOP, "report")
    if report["schema"] != SCHEMA_NAME:
        raise ReportSchemaError(f"report.schema is {report['schema']!r}, expected {SCHEMA_NAME!r}")
    if report["schema_version"].split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise ReportSchemaError(f"report.schema_version {report['schema_version']} is not {SCHEMA_VERSION}")
    if report["status"] not in REPORT_STATUSES:
        raise ReportSchemaError(f"report.status {report['status']!r} is not one of {REPORT_STATUSES}")
    if report["error"] is not None:
        _require(report["error"], {"kind": str, "message": str, "step": (str, type(None))}, "report.error")
        if report["error"]["kind"] not in ERROR_KINDS + ("internal",):
            raise ReportSchemaError(f"report.error.kind {report['error']['kind']!r} is unknown")
    _require(report["environment"], _ENV, "report.environment")
    _require(report["summary"], _SUMMARY, "report.summary")
    if list(report["steps"]) != list(STEP_ORDER):
        raise ReportSchemaError(f"report.steps must list {STEP_ORDER} in order, got {list(report['steps'])}")
    for name, step in report["steps"].items():
        _require(step, _STEP, f"report.steps.{name}")
        if step["status"] not in STEP_STATUSES:
            raise ReportSchemaError(f"report.steps.{name}.status {step['status']!r} is not one of {STEP_STATUSES}")
        for i, chk in enumerate(step["checks"]):
            _require(chk, _CHECK, f"report.steps.{name}.checks[{i}]")
