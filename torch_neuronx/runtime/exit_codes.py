"""The exit codes of every ``torchneuron`` command, in one map (as pip's ``status_codes``).

The CLI and every subcommand return these, and the pilot records its code in
``report.json``; nothing else picks a number. The map sits in the lowest layer
because the pilot, below the CLI, writes its code into its report.
"""
from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    SUCCESS = 0  # the command ran and every check passed
    FAILURE = 1  # it ran and found a problem: a failed check, a device-only failure
    USER_ERROR = 2  # input it cannot use (UsageError, ConfigError): one line on stderr
    INTERNAL_ERROR = 3  # a bug in the command (the pilot reports it with its traceback)
    INTERRUPTED = 128 + signal.SIGINT  # 130: stopped by SIGINT (Ctrl-C), the shell's 128 + N
    TERMINATED = 128 + signal.SIGTERM  # 143: stopped by SIGTERM


def interrupted_by(signum: int) -> ExitCode:
    """The code of a run stopped by ``signum``: SIGTERM is TERMINATED, any other interrupt INTERRUPTED."""
    return ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED
