"""The pilot report: its typed, versioned JSON schema and its self-contained HTML rendering."""
from .schema import (SCHEMA_NAME, SCHEMA_VERSION, STEP_ORDER, Check, Report, ReportSchemaError, StepSection,
                     to_json_text, validate_report)

__all__ = ["SCHEMA_NAME", "SCHEMA_VERSION", "STEP_ORDER", "Check", "Report", "ReportSchemaError", "StepSection",
           "to_json_text", "validate_report"]
