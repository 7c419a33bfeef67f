"""The coverage sweep's child process: probes the architectures the parent names, one per request.

A ``phase`` progress event before each stage tells the parent where a crash
happened, so a segfault on the CPU is not counted against the device. The
protocol is :mod:`torch_neuronx.testing.child_process`.
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--no-lowering", action="store_true", help="skip the StableHLO lowering check")
    args = parser.parse_args(argv)

    import torch  # noqa: F401  (registers neuron)

    from ..testing.child_process import serve
    from .probe import probe

    return serve(lambda request, emit: probe(request["model_type"], args.device,
                                             on_phase=lambda phase: emit({"phase": phase}),
                                             lower=not args.no_lowering))


if __name__ == "__main__":
    sys.exit(main())
