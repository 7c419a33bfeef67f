"""What every pilot step is handed: the run's options, its device and models, and its report.

One object instead of a positional signature per step, so the procedure can call every
step the same way (``steps/README.md``) and a step that needs one more thing reads it here.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from .config import PilotConfig
from .inputs import KnownInputs
from .recorder import ReportRecorder
from .report import Check, StepSection


@dataclasses.dataclass
class PilotContext:
    """The run as the steps see it; the procedure fills the fields in the order the steps need them.

    ``reference`` is the model on the CPU, ``model`` its copy on ``device`` (same weights);
    ``known`` the token batches every step feeds both; ``modes`` the execution modes that
    can run here (``eager``, ``compile``). ``step`` is the step being run, whose section
    :attr:`section`, :meth:`part` and :meth:`add_checks` address.
    """

    cfg: PilotConfig
    ui: Any  # console.PilotConsole
    recorder: ReportRecorder
    device: torch.device | None = None
    reference: Any = None
    model: Any = None
    tokenizer: Any = None
    known: KnownInputs | None = None
    modes: tuple[str, ...] = ()
    step: str = ""

    @property
    def workdir(self) -> Path:
        """Where this run's files go (published into ``--out`` when the run ends)."""
        return self.recorder.workdir

    @property
    def section(self) -> StepSection:
        """The running step's section of the report."""
        return self.recorder.section(self.step)

    def result(self, name: str) -> Any:
        """Another step's result (``None`` until that step made one)."""
        return self.recorder.section(name).result

    def part(self, label: str = "", total: int | None = None):
        """A timed part of the running step (``ReportRecorder.part``): yields ``advance()``."""
        return self.recorder.part(self.step, total, label)

    def add_checks(self, checks: list[Check]) -> None:
        self.section.checks.extend(checks)

    def settle(self) -> None:
        """Settle the running step now (a step with nothing to run, e.g. a skipped fine-tune)."""
        self.recorder.settle(self.step)
