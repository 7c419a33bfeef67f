"""Entry point of the ``torchneuron`` console script.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers its arguments and sets ``func`` to the function that runs it
(returning an :class:`ExitCode`). Every exit goes through that one map
(``runtime/exit_codes.py``): a :class:`UserError` — a command-line mistake
(:class:`UsageError`, a bad flag included) or an environment variable the
runtime cannot use (:class:`ConfigError`) — is one line on stderr and
``USER_ERROR``; SIGINT / SIGTERM is one line and ``INTERRUPTED`` / ``TERMINATED``;
any other exception is a bug of ours: its traceback, then ``INTERNAL_ERROR``.

The environment is checked here, before any command runs (:func:`environment_error`),
so every command names an unusable variable the same way, whether or not it would
have touched the device. A command that writes a report of a failed run sets
``on_config_error(args, error)`` (returning the exit code) to record it there too.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from torch_neuronx.runtime.errors import ConfigError, UsageError, UserError
from torch_neuronx.runtime.exit_codes import ExitCode, interrupted_by

SUBCOMMANDS = ("info", "pilot", "coverage", "plan")


class _Parser(argparse.ArgumentParser):
    """argparse's own mistakes (an unknown flag, a bad value) become a :class:`UsageError`,
    reported like every other user error instead of a usage block and ``sys.exit``; the
    hint names the command's own help (``torchneuron plan --help``)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def unknown(self, extras: list[str]):
        """Flags or arguments this command does not take, with the closest flag it does take."""
        from torch_neuronx.runtime.spellings import did_you_mean

        flag = next((x.split("=", 1)[0] for x in extras if x.startswith("--")), None)
        hint = did_you_mean(flag, self._option_string_actions) if flag else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments; a flag the command does not take is reported by the command's parser."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        (commands.choices.get(getattr(args, "command", None)) or parser).unknown(extras)
    return args


def environment_error() -> ConfigError | None:
    """The first environment variable this process cannot use: a value its declaration refuses,
    a topology that cannot exist (``runtime/environment.py``), an unusable calibration file."""
    from torch_neuronx import neuron
    from torch_neuronx.projection import active_calibration
    from torch_neuronx.runtime import environment

    error = environment.first_error() or neuron.config_error()
    if error is None:
        try:
            active_calibration()
        except ConfigError as exc:
            error = exc
    return error


def run(args: argparse.Namespace) -> int:
    """Run the command, unless the environment cannot be used: then one line (and the command's
    report, where it writes one) and ``USER_ERROR``."""
    error = environment_error()
    if error is not None:
        record = getattr(args, "on_config_error", None)
        if record is None:
            raise error
        return record(args, error)
    return args.func(args)


def main(argv: list[str] | None = None) -> int:
    from torch_neuronx.runtime.interrupts import interrupt_signal, sigterm_as_interrupt

    try:
        parser = build_parser()  # imports the subcommands: an interrupt here is one line too
        args = parse(parser, argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return ExitCode.USER_ERROR
        with sigterm_as_interrupt():
            return ExitCode(run(args) or ExitCode.SUCCESS)
    except UserError as exc:  # the user's input: one line, like every bad input
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USER_ERROR
    except KeyboardInterrupt as exc:  # a command that does not report its own interruption
        signum = interrupt_signal(exc)
        print(f"error: interrupted by {signum.name}", file=sys.stderr)
        return interrupted_by(signum)
    except Exception:  # not the user's doing: the traceback is what a bug report needs
        traceback.print_exc()
        print("error: internal error in torchneuron (the traceback above is for a bug report)", file=sys.stderr)
        return ExitCode.INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
