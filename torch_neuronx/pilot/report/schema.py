"""The versioned schema of ``report.json`` (documented in docs/pilot.md).

Bump ``SCHEMA_VERSION``'s major number when a key is removed or changes
meaning, the minor number when keys are added. :func:`validate_report` checks
the parts every consumer relies on; the runner calls it before writing, so a
report on disk always conforms.
"""
from __future__ import annotations

SCHEMA_NAME = "torchneuron-pilot-report"
SCHEMA_VERSION = "1.0"

# The procedure order; also the order of the HTML sections.
STEP_ORDER = ("inputs", "numerics", "quality", "finetune", "checkpoint", "compilation", "performance", "cost")
STEP_STATUSES = ("passed", "failed", "error", "skipped", "not_available", "not_run")
REPORT_STATUSES = ("passed", "failed", "error")
ERROR_KINDS = ("bad_input", "not_causal_lm", "out_of_memory", "unsupported_dtype", "device_unavailable")


class ReportSchemaError(ValueError):
    """A report does not follow the schema."""


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
