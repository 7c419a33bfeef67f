"""Entry point of one spawned rank: ``python -m worker <scenario> [args...]``.

The rank then exits normally, so the tests also cover interpreter teardown
with the process groups a scenario leaves behind."""
import sys

import scenarios

if __name__ == "__main__":
    getattr(scenarios, sys.argv[1])(*sys.argv[2:])
