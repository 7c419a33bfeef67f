"""Entry point of one spawned rank: ``python -m worker <scenario> [args...]``."""
import sys

import scenarios

if __name__ == "__main__":
    getattr(scenarios, sys.argv[1])(*sys.argv[2:])
