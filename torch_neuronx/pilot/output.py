"""Where a pilot's files go: ``--out`` checked first, a run staged apart, published only when it ends.

A run writes into a fresh staging directory inside ``--out``. A run that reaches its
end (its checks passed or failed) replaces the previous run's files in one pass,
``report.json`` last. A run that stops on an error (bad input, an unusable setting,
an internal error) or an interrupt replaces nothing: the last complete run's files
stay as they were, and its own report goes beside them (``report.error.json`` and
``report.error.html``, or ``report.interrupted.json``). Only the pilot's own file
names are ever touched in ``--out``, and nothing is ever written inside the model
directory.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..runtime.staged_files import unwritable_reason, write_text_whole
from .config import PilotError

REPORT = "report.json"
PROJECTED_TRACE = "projected-trace.json"  # the fine-tune steps' projected timeline (Chrome/Perfetto)
INTERRUPTED = "report.interrupted.json"
ERROR_REPORT, ERROR_PAGE = "report.error.json", "report.error.html"  # a run that stopped on an error
# every name a run may leave in --out; report.json is published last, so it marks a complete run
RUN_FILES = ("inputs.json", "checkpoint", "report.html", PROJECTED_TRACE, REPORT)
STAGING_PREFIX = ".pilot-run-"


def check_out(out: Path, model: str | None) -> None:
    """Raise a one-line :class:`PilotError` unless ``out`` is a directory the pilot may create and write."""
    target = Path(out).resolve()
    if model is not None:
        model_dir = Path(model).resolve()
        if target == model_dir or model_dir in target.parents:
            raise PilotError("bad_input", f"--out {out} is inside the model directory {model}: the pilot never "
                                          "writes there; choose another --out")
        if target in model_dir.parents:
            raise PilotError("bad_input", f"--out {out} contains the model directory {model}: a rerun would "
                                          "replace files beside the model; choose another --out")
    problem = unwritable_reason(target, is_dir=True)
    if problem:
        raise PilotError("bad_input", f"--out {out} {problem}")


class Staging:
    """A run's own directory inside ``out``, published into ``out`` or discarded."""

    def __init__(self, out: Path):
        self.out = Path(out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.out))
        except OSError as exc:
            raise PilotError("bad_input", f"--out {out} cannot be written: {exc.strerror or exc}") from None

    def publish(self) -> list[Path]:
        """Replace the previous run's files by this run's; files this run did not produce go too,
        and so do the reports of runs that stopped since. Returns the report's two files."""
        for name in (INTERRUPTED, ERROR_REPORT, ERROR_PAGE):
            _remove(self.out / name)
        for name in RUN_FILES:
            new, old = self.dir / name, self.out / name
            if old.is_dir() or not new.exists():  # a file is replaced atomically below; a directory is not
                _remove(old)
            if new.exists():
                os.replace(new, old)
        self.discard()
        return [self.out / REPORT, self.out / "report.html"]

    def keep_failed(self) -> list[Path]:
        """A run that stopped on an error: its report beside the last complete run's files, which
        stay as they were; this run's other files are discarded. Returns the report's files."""
        kept = []
        for staged, name in ((REPORT, ERROR_REPORT), ("report.html", ERROR_PAGE)):
            if (self.dir / staged).exists():
                os.replace(self.dir / staged, self.out / name)
                kept.append(self.out / name)
        self.discard()
        return kept

    def keep_interrupted(self, text: str) -> Path:
        """The partial report beside the previous one; this run's other files are discarded."""
        path = self.out / INTERRUPTED
        write_text_whole(path, text)
        self.discard()
        return path

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
