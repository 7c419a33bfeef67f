"""Errors every layer raises or reports, and the one way to summarise one."""
from __future__ import annotations


class UserError(ValueError):
    """Input from the user that cannot be used: reported in one line, never as a traceback,
    with ``ExitCode.USER_ERROR`` (``runtime/exit_codes.py``). Raise one of its two kinds."""


class ConfigError(UserError):
    """An environment variable has a value the runtime cannot use."""


class UsageError(UserError):
    """A command-line mistake: a flag, argument or output path the command cannot use."""


class DataFileError(RuntimeError):
    """A data file shipped with the package (``projection/hardware.json``, the fitted factors,
    the traced published work) is missing, unreadable or lacks an entry: a broken install or
    a stale file, not the user's input, so not a :class:`UserError`. The message names the
    file and how to regenerate it where it is generated."""


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """``"TypeName: first line of the message"`` (at most ``limit`` characters of
    message), for reports and logs that show one line per failure."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    if limit is not None:
        line = line[:limit]
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
