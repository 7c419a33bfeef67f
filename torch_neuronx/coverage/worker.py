"""A child process that probes architectures named on its stdin, one per line.

Results go to stdout as lines starting with :data:`MARKER` (models may print
their own lines); a ``phase`` line before each stage tells the parent where a
crash happened, so a segfault on the CPU is not counted against the device.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

MARKER = "@@coverage@@ "


def _emit(stream, payload: dict) -> None:
    stream.write(MARKER + json.dumps(payload) + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="neuron")
    args = parser.parse_args(argv)
    # Library chatter goes to stderr; our protocol keeps a private copy of stdout.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    import torch  # noqa: F401  (registers neuron)

    from .probe import probe

    _emit(out, {"event": "ready"})
    for line in sys.stdin:
        model_type = line.strip()
        if not model_type:
            continue
        result = probe(model_type, args.device,
                       on_phase=lambda phase: _emit(out, {"event": "phase", "model_type": model_type, "phase": phase}))
        _emit(out, {"event": "result", "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
