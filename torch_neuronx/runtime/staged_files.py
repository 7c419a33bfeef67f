"""Output files written whole or not at all.

Each file is written under a temporary name beside its target and renamed over
it only when every file of the set is complete (``os.replace`` is atomic on one
file system), so a full disk, an error or an interrupt leaves the previous
files intact and no truncated one. The location is checked before any work.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from .interrupts import signals_held


def unwritable_reason(path: os.PathLike | str, is_dir: bool = False) -> str | None:
    """Why ``path`` (a file, or a directory with ``is_dir``) cannot be created and
    written, or ``None``. Missing parents are fine when the nearest existing one is a
    writable directory; writability is tried with a probe file, since permission bits
    do not tell (root, read-only mounts, /proc)."""
    target = Path(path).absolute()
    if target.exists() and target.is_dir() != is_dir:
        return "is an existing directory, not a file" if target.is_dir() else "is an existing file, not a directory"
    existing = target if (is_dir and target.is_dir()) else target.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be created: {existing} is a file"
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=existing)
    except OSError as exc:
        return f"cannot be written in {existing}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None


class StagedFiles:
    """A set of text files staged beside their targets, then published together or discarded.

    Use as a context manager: leaving the block by an exception (or an interrupt)
    removes what was staged; :meth:`publish` renames every staged file over its
    target, the last one staged last, with SIGINT/SIGTERM held back meanwhile.
    """

    def __init__(self) -> None:
        self.staged: list[tuple[Path, Path]] = []  # (temporary file, target)
        self.published = False  # every staged file is in place (an interrupt held back may follow)

    def write_text(self, target: os.PathLike | str, text: str) -> None:
        self.write_bytes(target, text.encode("utf-8"))

    def write_bytes(self, target: os.PathLike | str, data: bytes) -> None:
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            # os.open, not mkstemp: the published file gets the usual umask mode, not 0600
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            self.staged.append((tmp, target))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:  # a failed write names the staging file or nothing: name the target
            exc.filename = str(target)
            raise

    def publish(self) -> None:
        with signals_held():
            for tmp, target in self.staged:
                os.replace(tmp, target)
            self.staged.clear()
            self.published = True

    def discard(self) -> None:
        for tmp, _ in self.staged:
            tmp.unlink(missing_ok=True)
        self.staged.clear()

    def __enter__(self) -> StagedFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def write_text_whole(target: os.PathLike | str, text: str) -> None:
    """Replace ``target`` by ``text`` in one step: the old content or the new, never a part."""
    write_bytes_whole(target, text.encode("utf-8"))


def write_bytes_whole(target: os.PathLike | str, data: bytes) -> None:
    """Replace ``target`` by ``data`` in one step: the old content or the new, never a part."""
    with StagedFiles() as files:
        files.write_bytes(target, data)
        files.publish()
