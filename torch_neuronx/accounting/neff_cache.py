"""The persistent NEFF cache: one small file per compiled kernel signature.

On Trainium, neuronx-cc output is cached on disk so that a second run (or
another rank) skips compilation. We store a record per signature instead of
a NEFF, which is all that is needed to know whether Trainium would compile.
Many processes share one directory: each shard has a file lock, and entries
are written to a temporary file and renamed into place, so a reader never sees
half an entry. An unreadable entry is treated as missing and rewritten.
"""
from __future__ import annotations

import enum
import json
import os
import tempfile
import time
from pathlib import Path

from filelock import FileLock, Timeout

from ..runtime.log import get_logger

FORMAT = 1
_LOCK_TIMEOUT_S = 60.0
_log = get_logger("neff_cache")


class Outcome(enum.Enum):
    HIT = "hit"          # a valid entry was already there
    MISS = "miss"        # no entry: this process "compiles" and writes one
    CORRUPT = "corrupt"  # an unreadable entry: counted as a miss and rewritten


class NeffCache:
    def __init__(self, directory: os.PathLike | str):
        self.directory = Path(directory)
        self._write_failed = False  # warn once, not once per signature

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def _read_valid(self, path: Path, key: str) -> bool | None:
        """True for a valid entry, None if absent, False if unreadable."""
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and record.get("format") == FORMAT and record.get("key") == key

    def claim(self, key: str, record: dict) -> Outcome:
        """Look ``key`` up; if it is absent or corrupt, write ``record`` for it.

        Never raises for I/O problems: accounting must not break the job, so an
        unusable directory degrades to "every signature is a miss".
        """
        path = self._entry(key)
        status = self._read_valid(path, key)
        if status:
            return Outcome.HIT
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path.parent / ".lock"), timeout=_LOCK_TIMEOUT_S):
                # Another rank may have compiled it while we waited.
                status = self._read_valid(path, key)
                if status:
                    return Outcome.HIT
                self._write_atomic(path, {"format": FORMAT, "key": key, "created": time.time(), **record})
        except (OSError, Timeout) as exc:
            if not self._write_failed:
                self._write_failed = True
                _log.warning("NEFF cache %s is not usable, every new signature counts as a miss: %s",
                             self.directory, exc)
        return Outcome.MISS if status is None else Outcome.CORRUPT

    @staticmethod
    def _write_atomic(path: Path, record: dict) -> None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(record, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def usage(self) -> tuple[int, int]:
        """(entry count, bytes) currently on disk."""
        entries = size = 0
        if not self.directory.is_dir():
            return 0, 0
        for shard in self.directory.iterdir():
            if not shard.is_dir():
                continue
            for entry in shard.glob("*.json"):
                if entry.name.startswith(".tmp-"):
                    continue
                try:
                    size += entry.stat().st_size
                except FileNotFoundError:
                    continue
                entries += 1
        return entries, size
