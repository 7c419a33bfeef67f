"""Entry point of one spawned rank: ``python -m worker [module:]scenario [args...]``
(module ``scenarios`` unless named).

The rank then exits normally, so the tests also cover interpreter teardown
with the process groups a scenario leaves behind."""
import importlib
import sys

if __name__ == "__main__":
    module, _, name = sys.argv[1].rpartition(":")
    getattr(importlib.import_module(module or "scenarios"), name)(*sys.argv[2:])
