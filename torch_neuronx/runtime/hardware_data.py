"""The one hardware table (``projection/hardware.json``), readable from any layer.

Instance sizes (``runtime/profiles.py``), NKI limits and clocks (``nki/hardware.py``)
and the projection's device model all read their figures from this one file, each
held once with its source. It is read by path, not imported, so the layers below
``projection`` can use it without depending on that package.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parent.parent / "projection" / "hardware.json"


@functools.lru_cache(maxsize=1)
def load_hardware_data() -> dict:
    """The parsed table (cached: it never changes while a process runs)."""
    return json.loads(DATA_FILE.read_text(encoding="utf-8"))


def figure(entry: dict):
    """The value of a sourced figure (``{"value": ..., "source": ...}``)."""
    return entry["value"]
