"""A graph torch-mlir cannot lower: the error, and what its diagnostics name."""
from __future__ import annotations

import re
from typing import Sequence

_ILLEGAL_OP = re.compile(r"failed to legalize operation '([^']+)'")
_OPERATOR_NAME = re.compile(r'<\{name = "([^"]+)"')


def _illegal_ops(diagnostics: Sequence[str]) -> list[str]:
    """The ops torch-mlir's diagnostics say it failed to legalize, in order."""
    illegal = []
    for message in diagnostics:
        match = _ILLEGAL_OP.search(message)
        if match:
            named = _OPERATOR_NAME.search(message) if match.group(1) == "torch.operator" else None
            illegal.append(named.group(1) if named else match.group(1))
    return illegal


def summarise_failure(diagnostics: Sequence[str], exc: BaseException) -> str:
    """The op torch-mlir could not lower, e.g. ``no lowering for torch.aten.erfinv``.

    Constants left behind by an op that did not lower are named only when no
    op is (they are a symptom, not the cause).
    """
    illegal = _illegal_ops(diagnostics)
    if illegal:
        causes = [name for name in illegal if not name.startswith("torch.constant.")] or illegal
        return f"no lowering for {causes[0]}"
    text = "; ".join(d for d in diagnostics if "backend contract" not in d) or str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class LoweringError(RuntimeError):
    """torch-mlir could not lower a graph to StableHLO; ``diagnostics`` holds its messages.

    ``unsupported`` is True when torch-mlir named what it cannot lower (an op
    or a type): what would fail on Trainium too. False means it failed
    without saying why (an internal error of the pipeline or of our re-trace),
    which says nothing about the graph. ``names_op`` is False when all it
    named is a ``torch.constant.*`` left unconverted: a symptom, whose cause
    (the op that consumed it) is found by lowering the graph's kernels alone.
    """

    def __init__(self, message: str, diagnostics: Sequence[str] = ()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)
        self.unsupported = bool(self.diagnostics)
        self.names_op = any(not name.startswith("torch.constant.") for name in _illegal_ops(self.diagnostics))
