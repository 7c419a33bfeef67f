"""One line for an exception, the form every tool prints and records.

The core is getting ``torch_neuronx.runtime.errors.first_line``; this module is
the tools layer's copy until the two are merged.
"""
from __future__ import annotations


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """``TypeName: first line of the message`` (cut to ``limit`` characters when given)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    if limit is not None:
        line = line[:limit]
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
