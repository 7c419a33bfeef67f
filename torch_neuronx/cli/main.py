"""Entry point of the ``torchneuron`` console script.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers its arguments and sets ``func`` to the function that runs it
(returning the process exit code). A :class:`ConfigError` (an environment
variable the runtime cannot use) is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ("info", "pilot", "coverage", "plan")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchneuron",
        description="TorchNeuron-OSS: the `neuron` PyTorch device (AWS Trainium), emulated on the host.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"torch_neuronx.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"torch_neuronx.cli.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from torch_neuronx.runtime.errors import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:  # a bad environment variable: one line, like every bad input
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
