"""The coverage sweep's child process: probes the architectures the parent names, one per request.

A ``phase`` progress event before each stage tells the parent where a crash
happened, so a segfault on the CPU is not counted against the device; with
``--compiled`` the eager checks' result travels with the ``compiled`` phase, so
a crash while compiling loses only the compiled columns. The protocol is
:mod:`torch_neuronx.testing.child_process`.
"""
from __future__ import annotations

import argparse
import sys

from ..testing.tiny_models import TinySize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--no-lowering", action="store_true", help="skip the StableHLO lowering check")
    parser.add_argument("--compiled", action="store_true", help="add the torch.compile checks")
    parser.add_argument("--layers", type=int, default=TinySize().layers, help="decoder layers of each tiny model")
    args = parser.parse_args(argv)

    import torch  # noqa: F401  (registers neuron)

    from ..testing.child_process import serve
    from .compiled import probe_compiled
    from .probe import probe

    size = TinySize(layers=args.layers)

    def handle(request: dict, emit) -> dict:
        def on_phase(phase: str) -> None:
            emit({"phase": phase})

        result = probe(request["model_type"], args.device, on_phase=on_phase, lower=not args.no_lowering, size=size)
        if args.compiled and result["status"] != "build_failed":
            emit({"phase": "compiled", "partial": result})
            result["compiled"] = probe_compiled(request["model_type"], args.device, on_phase, size)
        return result

    return serve(handle)


if __name__ == "__main__":
    sys.exit(main())
