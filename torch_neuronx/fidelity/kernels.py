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

from ..runtime.config import ConfigError, env_flag, env_str
from .host_ops import OpTracker, host_ops_from_env
from .logging import get_logger
from .neff_cache import NeffCache, Outcome, default_dir

DEFAULT_COMPILE_SECONDS = 2.0
DEFAULT_OPT_LEVEL = "-O1"  # the real product's level for eager per-op kernels
_log = get_logger("kernels")


def compiler_config(family: str, lnc: int) -> dict:
    """Everything besides the op itself that changes a compiled NEFF."""
    return {
        "flags": env_str("NEURON_CC_FLAGS", "") or "",
        "opt_level": env_str("NEURON_COMPILER_OPT_LEVEL", DEFAULT_OPT_LEVEL),
        "target": family,
        "logical_nc_config": lnc,
        "torch": torch.__version__,
    }


def salt_of(config: dict) -> int:
    digest = hashlib.blake2b(json.dumps(config, sort_keys=True).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def compile_seconds_from_env() -> float:
    raw = env_str("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", None)
    if raw is None:
        return DEFAULT_COMPILE_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(
            f"TORCHNEURON_COMPILE_SECONDS_PER_KERNEL={raw!r} is not a non-negative number of seconds")
    return value


class Accounting:
    def __init__(self, cache: NeffCache | None, config: dict, compile_seconds: float, tracker: OpTracker):
        self.cache = cache
        self.config = config
        self.compile_seconds = compile_seconds
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
        _log.debug("compile (estimate %.1fs): %s", self.compile_seconds, description)


def make_accounting(family: str, lnc: int) -> Accounting:
    cache = None
    disabled = env_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE", False) or env_flag(
        "TORCH_NEURONX_DISABLE_NEFF_CACHE", False)  # the real product reads both spellings
    if not disabled:
        cache = NeffCache(env_str("TORCH_NEURONX_NEFF_CACHE_DIR", None) or default_dir())
    return Accounting(cache, compiler_config(family, lnc), compile_seconds_from_env(),
                      OpTracker(host_ops_from_env()))


def enabled_from_env() -> bool:
    return env_flag("TORCHNEURON_KERNEL_ACCOUNTING", True)

