"""Errors every layer raises or reports, and the one way to summarise one."""
from __future__ import annotations


class ConfigError(ValueError):
    """An environment variable has a value the runtime cannot use."""


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """``"TypeName: first line of the message"`` (at most ``limit`` characters of
    message), for reports and logs that show one line per failure."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    if limit is not None:
        line = line[:limit]
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
