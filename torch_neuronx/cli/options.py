"""Options several commands share, declared once so that every command spells them the same:
the instance profile, the dtype, lists of numbers, and the help hint of a mistyped flag."""
from __future__ import annotations

import argparse

from torch_neuronx.runtime.errors import UsageError


def _argument_type(check):
    """An argparse ``type`` from ``check(text)``, whose one-line error argparse shows as is."""
    def convert(text: str):
        try:
            return check(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = check.__name__
    return convert


def _instance(text: str) -> str:
    from torch_neuronx.runtime.profiles import PROFILES
    from torch_neuronx.runtime.spellings import pick

    return pick(text, PROFILES, "")


def _dtype(text: str) -> str:
    from torch_neuronx.runtime.spellings import dtype_name

    return dtype_name(text, "")


instance = _argument_type(_instance)  # an instance profile, any case, with a did-you-mean
dtype = _argument_type(_dtype)  # float32 / bfloat16 / float16 in any accepted spelling (runtime/spellings.py)


def add_instance(parser: argparse.ArgumentParser, what_for: str) -> None:
    """``--instance``: the profile whose cores, HBM and price ``what_for`` uses; by default the
    configured one (``TORCHNEURON_INSTANCE``, else ``trn2.3xlarge``), as for the device."""
    parser.add_argument("--instance", type=instance, default=None,
                        help=f"instance profile for {what_for} (default: TORCHNEURON_INSTANCE or trn2.3xlarge; "
                             "any case)")


def _length(text: str) -> list[int] | None:
    """The integers of ``32`` or ``32,64``; None when ``text`` is not such a list."""
    try:
        return [int(x) for x in text.split(",") if x.strip()] or None
    except ValueError:
        return None


class Lengths(argparse.Action):
    """A list of lengths written ``--seq-lens 32 64`` or ``--seq-lens 32,64``. A value after the
    lengths that is not one is the command's MODEL when none was given before it, so
    ``pilot --seq-lens 32 64 ./ckpt`` reads as written instead of taking ``64`` for the model."""

    def __init__(self, option_strings, dest, positional: str = "model", **kwargs):
        self.positional = positional
        super().__init__(option_strings, dest, nargs="+", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        lengths = []
        for i, text in enumerate(values):
            parsed = _length(text)
            if parsed is None:
                if i == 0:
                    parser.error(f"argument {option_string}: {text!r} is not a length or a comma-separated "
                                 "list of lengths, e.g. 32 64 or 32,64")
                self._take_positional(parser, namespace, values[i:], option_string)
                break
            lengths += parsed
        setattr(namespace, self.dest, tuple(lengths))

    def _take_positional(self, parser, namespace, rest: list[str], option_string: str) -> None:
        if len(rest) > 1 or getattr(namespace, self.positional, None) is not None:
            parser.error(f"argument {option_string}: {' '.join(rest)!r} is neither a length nor the "
                         f"{self.positional.upper()} (given once)")
        setattr(namespace, self.positional, rest[0])
