"""Per-signature kernel accounting: what Trainium would compile, and when.

The C++ fallback and fast path key every kernel they run (op, shapes, dtypes,
static arguments by value and other scalars by type, see ``kernel_key.py``;
salted with the compiler configuration) and count repeats themselves; only a signature new to this process reaches
``Accounting.on_new_signature``, which consults the in-process set of
"compiled" kernels and then the persistent NEFF cache.
"""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict

import torch

from ..runtime import cache_dirs, settings
from ..runtime.log import get_logger
from .host_ops import OpTracker, host_ops_from_env
from .neff_cache import NeffCache, Outcome

_log = get_logger("kernels")


def compiler_config(family: str, lnc: int) -> dict:
    """Everything besides the op itself that changes a compiled NEFF."""
    return {
        "flags": settings.get_str("NEURON_CC_FLAGS"),
        "opt_level": settings.get_str("NEURON_COMPILER_OPT_LEVEL"),  # the real product's -O1 by default
        "target": family,
        "logical_nc_config": lnc,
        "torch": torch.__version__,
    }


def salt_of(config: dict) -> int:
    digest = hashlib.blake2b(json.dumps(config, sort_keys=True).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class Accounting:
    def __init__(self, cache: NeffCache | None, config: dict, tracker: OpTracker):
        self.cache = cache
        self.config = config
        self.tracker = tracker
        self.compiled: set[str] = set()  # kernels "loaded" in this process; survives resets
        self.reset()

    def reset(self) -> None:
        self.disk_hits = 0
        self.reloaded = 0  # compiled earlier in this process, first seen again after a reset
        self.misses = 0
        self.corrupt = 0
        self.op_misses: dict[str, int] = defaultdict(int)
        self.op_signatures: dict[str, set[str]] = defaultdict(set)
        self.host_ops_run: set[str] = set()  # ops the real product runs on the CPU: never compiled
        self.host_first_calls = 0

    def on_new_signature(self, op: str, key: str, description: str) -> None:
        self.op_signatures[op].add(key)
        if self.tracker.note(op):
            self.host_ops_run.add(op)
            self.host_first_calls += 1
            return
        if key in self.compiled:
            self.reloaded += 1
            return
        self.compiled.add(key)
        outcome = Outcome.MISS
        if self.cache is not None:
            outcome = self.cache.claim(key, {"op": op, "signature": description, "compiler": self.config})
        if outcome is Outcome.HIT:
            self.disk_hits += 1
            return
        self.misses += 1
        self.op_misses[op] += 1
        if outcome is Outcome.CORRUPT:
            self.corrupt += 1
            _log.info("NEFF cache entry %s was unreadable and has been rewritten", key)
        _log.debug("compile: %s", description)


def make_accounting(family: str, lnc: int) -> Accounting:
    cache = NeffCache(cache_dirs.neff_dir()) if cache_dirs.persistent_cache_enabled() else None
    return Accounting(cache, compiler_config(family, lnc), OpTracker(host_ops_from_env()))


def enabled_from_env() -> bool:
    return settings.get_flag("TORCHNEURON_KERNEL_ACCOUNTING")

