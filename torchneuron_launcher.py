"""The ``torchneuron`` console script: Ctrl-C while ``torch`` still imports is one line too.

Any module inside ``torch_neuronx`` imports ``torch`` first (the package registers the
device), which takes seconds; an interrupt then would end in Python's traceback before the
command's own handler (``torch_neuronx/cli/main.py``) exists. This module, outside the
package, imports nothing heavy before its ``try``.
"""
from __future__ import annotations

import signal
import sys

# ExitCode.INTERRUPTED of torch_neuronx/runtime/exit_codes.py, which cannot be imported while
# the import it would report on is what was interrupted (tests/cli/test_cli_exit_codes.py checks
# that the two agree).
INTERRUPTED_WHILE_IMPORTING = 128 + signal.SIGINT


def main() -> int:
    try:
        from torch_neuronx.cli.main import main as run_command
    except KeyboardInterrupt:
        print("error: interrupted by SIGINT", file=sys.stderr)
        return INTERRUPTED_WHILE_IMPORTING
    return run_command()


if __name__ == "__main__":
    sys.exit(main())
