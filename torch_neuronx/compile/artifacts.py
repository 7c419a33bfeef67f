"""Compiled artefacts degrade, they never break a job.

Inductor builds each graph's C++ into a shared object in the compile cache and,
when that file exists, loads it without a check. A process killed while the
compiler wrote it leaves a truncated ``.so`` that fails every later compile of
that graph (``file too short``) until the user deletes the cache by hand (stock
Inductor shares the bug). Here:

- builds write to a temporary file that is renamed into place, so a reader
  never sees half a library;
- a built library that fails to load is moved to ``quarantine/`` in the cache,
  rebuilt and loaded again, with one warning per process;
- the same for the small library Inductor builds to probe the CPU's vector ISA:
  a truncated one failed the probe, so the process believed the CPU had no AVX
  and compiled vectorised kernels without the ISA flags (``'at::vec' has not
  been declared``);
- an FX graph cache entry that cannot be unpickled is removed after Inductor's
  warning, instead of warning again in every run;
- precompiled headers go under the configured cache, not Inductor's default
  directory in ``/tmp`` (which it fixes when it is imported).
"""
from __future__ import annotations

import copy
import logging
import os
import pickle
import time
from pathlib import Path

from torch._inductor import codecache, cpu_vec_isa
from torch._inductor.runtime.cache_dir_utils import cache_dir

from ..runtime.log import get_logger

QUARANTINE_DIR = "quarantine"
_log = get_logger("compile_cache")
# The builders of each library this process built or found (target path -> lock, builders),
# so that an unloadable library can be rebuilt where Inductor only knows its path.
_builds: dict[str, tuple[str, tuple]] = {}
_warned = False


def install() -> None:
    """Patch Inductor's C++ build, library load and FX-cache lookup (idempotent)."""
    if getattr(codecache, "_torchneuron_artifacts", False):
        return
    codecache._torchneuron_artifacts = True
    codecache._HEADER_DIR = os.path.join(cache_dir(), "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
    codecache._worker_compile_cpp = build_atomically
    load = codecache.CppCodeCache._load_library.__func__
    codecache.CppCodeCache._load_library = classmethod(
        lambda cls, path, key: _load_or_rebuild(load, cls, path, key))
    candidates = codecache.FxGraphCache.iterate_over_candidates.__func__
    codecache.FxGraphCache.iterate_over_candidates = classmethod(
        lambda cls, local, remote, key: _candidates_removing_corrupt(candidates, cls, local, remote, key))
    logging.getLogger(codecache.__name__).addFilter(_corrupt_entry_seen)
    check_build = cpu_vec_isa.VecISA.check_build
    cpu_vec_isa.VecISA.check_build = lambda isa, code: _check_isa_repairing(check_build, isa, code)


def build_atomically(lock_path: str, cpp_builders) -> None:
    """Inductor's ``_worker_compile_cpp``, with each output written under a temporary
    name and renamed into place."""
    from torch.utils._filelock import FileLock

    builders = tuple(cpp_builders)
    with FileLock(lock_path, timeout=codecache.LOCK_TIMEOUT):
        for builder in builders:
            target = builder.get_target_file_path()
            _builds[target] = (lock_path, builders)
            if not os.path.exists(target):
                _build_to(builder, target)


def _build_to(builder, target: str) -> None:
    staged = copy.copy(builder)
    temporary = os.path.join(os.path.dirname(target), f".tmp-{os.getpid()}-{os.path.basename(target)}")
    staged._target_file = temporary
    staged._output = builder._output.replace(target, temporary)
    if staged._output == builder._output:  # Inductor changed how it names outputs: build in place
        builder.build()
        return
    try:
        staged.build()
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _load_or_rebuild(load, cls, path: str, key: str):
    try:
        return load(cls, path, key)
    except (ImportError, OSError) as exc:
        if path not in _builds:
            raise
        lock_path, builders = _builds[path]
        _quarantine([b.get_target_file_path() for b in builders], exc)
    build_atomically(lock_path, builders)
    return load(cls, path, key)


def _check_isa_repairing(check_build, isa, code: str) -> bool:
    """``VecISA.check_build``, with a truncated probe library quarantined first.

    The probe runs the library in a child process and reads any failure as "this
    CPU lacks the ISA", so a damaged file must be told apart before it runs: by
    its ELF layout, not by loading it (an unsupported ISA fails the same way)."""
    _, source = codecache.write(
        code, "cpp", extra=cpu_vec_isa._get_isa_dry_compile_fingerprint(isa.build_arch_flags()))
    library = Path(source).with_suffix(".so")  # Inductor names the probe after its source
    if library.exists() and _is_truncated_elf(library):
        _quarantine([str(library)], OSError(f"{library.name}: file too short"))
    return check_build(isa, code)


def _is_truncated_elf(path: Path) -> bool:
    """A 64-bit little-endian ELF file ends with its section header table; a file
    shorter than where that table ends was cut off while it was written."""
    with path.open("rb") as f:
        header = f.read(64)
    if len(header) < 64 or header[:4] != b"\x7fELF":
        return True
    if header[4:6] != b"\x02\x01":  # not ELF64 little-endian: no opinion
        return False
    table_offset = int.from_bytes(header[0x28:0x30], "little")
    entry_size = int.from_bytes(header[0x3A:0x3C], "little")
    entries = int.from_bytes(header[0x3C:0x3E], "little")
    return path.stat().st_size < table_offset + entry_size * entries


def _quarantine(paths: list[str], exc: BaseException) -> None:
    global _warned
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for path in map(Path, paths):
        if not path.exists():
            continue
        place = path.parent.parent / QUARANTINE_DIR
        place.mkdir(exist_ok=True)
        os.replace(path, place / f"{stamp}-{os.getpid()}-{path.name}")
        if not _warned:
            _warned = True
            _log.warning("compiled artifact %s could not be loaded (%s); moved it to %s and recompiled",
                         path, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                         place)


class _CorruptEntrySeen(logging.Filter):
    """Notes Inductor's "unable to load compiled graph" warning (it swallows the error)."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "unable to load compiled graph" in record.getMessage():
            self.seen = True
        return True


_corrupt_entry_seen = _CorruptEntrySeen()


def _candidates_removing_corrupt(candidates, cls, local, remote, key):
    _corrupt_entry_seen.seen = False
    try:
        yield from candidates(cls, local, remote, key)
    finally:
        if local and _corrupt_entry_seen.seen:
            _remove_unpicklable(Path(cls._get_tmp_dir_for_key(key)))


def _remove_unpicklable(directory: Path) -> None:
    for entry in directory.iterdir() if directory.is_dir() else ():
        if entry.name.startswith("."):
            continue
        try:
            pickle.loads(entry.read_bytes())
        except Exception:
            entry.unlink(missing_ok=True)
            _log.warning("removed the unreadable compiled-graph cache entry %s", entry)
