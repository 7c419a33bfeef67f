"""The pilot report: its versioned JSON schema and its self-contained HTML rendering."""
from .schema import SCHEMA_NAME, SCHEMA_VERSION, STEP_ORDER, ReportSchemaError, validate_report

__all__ = ["SCHEMA_NAME", "SCHEMA_VERSION", "STEP_ORDER", "ReportSchemaError", "validate_report"]
