"""The names users type for one thing, the same for every command: dtypes, instance profiles,
model names. Matched without regard to case; a name that matches nothing gets a one-line
error listing what is allowed and, when one is close, a "did you mean".
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable

from .errors import UsageError

# canonical name -> every spelling a command accepts for it (PyTorch's name first)
DTYPE_SPELLINGS = {
    "float32": ("float32", "fp32", "float", "f32"),
    "bfloat16": ("bfloat16", "bf16"),
    "float16": ("float16", "fp16", "half", "f16"),
}
SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # the plan's and the docs' short names


def closest(given: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``given`` was most likely meant to be (case-insensitive), or None."""
    by_lower = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(given.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[found[0]] if found else None


def did_you_mean(given: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` when a candidate is close to ``given``, else ``""``."""
    near = closest(given, candidates)
    return f"; did you mean {near!r}?" if near else ""


def pick(given: str, candidates: Iterable[str], what: str, allowed: str | None = None) -> str:
    """The candidate equal to ``given`` up to case; else a one-line :class:`UsageError` naming
    ``what`` (e.g. ``--instance``), the allowed values (or ``allowed``, what they are when
    they are too many to list) and the closest one."""
    candidates = list(candidates)
    for candidate in candidates:
        if candidate.lower() == given.strip().lower():
            return candidate
    allowed = allowed or f"one of {', '.join(candidates)}"
    raise UsageError(f"{what} {given!r} is not {allowed}{did_you_mean(given, candidates)}".lstrip())


def dtype_name(given: str, what: str = "--dtype") -> str:
    """The canonical dtype (``float32``, ``bfloat16``, ``float16``) of any accepted spelling."""
    spellings = {s: name for name, names in DTYPE_SPELLINGS.items() for s in names}
    try:
        return spellings[pick(given, spellings, what)]
    except UsageError:
        listed = ", ".join(f"{name} ({'/'.join(names[1:])})" for name, names in DTYPE_SPELLINGS.items())
        raise UsageError(f"{what} {given!r} is not a supported dtype; choose {listed}"
                         f"{did_you_mean(given, spellings)}".lstrip()) from None
