"""Entry point of the ``torchneuron`` console script.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers its arguments and sets ``func`` to the function that runs it
(returning the process exit code). A :class:`ConfigError` (an environment
variable or argument the runtime cannot use) is one line on stderr and exit code 2;
SIGINT / SIGTERM is one line and exit code 130 / 143.
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
    from torch_neuronx.runtime.interrupts import interrupt_signal, sigterm_as_interrupt

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with sigterm_as_interrupt():
            return int(args.func(args) or 0)
    except ConfigError as exc:  # a bad environment variable or argument: one line, like every bad input
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # a command that does not report its own interruption
        signum = interrupt_signal(exc)
        print(f"error: interrupted by {signum.name}", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
