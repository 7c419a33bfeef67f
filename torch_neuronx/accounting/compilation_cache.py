"""The real product's compilation-cache counters, from our accounting.

The real product puts an in-memory cache (key -> NEFF) in front of the
persistent disk cache and counts each tier separately;
``torch_neuronx._C._get_compilation_cache_stats()`` names the counters
(TR torch_neuronx/csrc/core/NeuronBindings.cpp:1014-1091; the tiers:
TR torch_neuronx/csrc/core/compilation/CompilationCache.cpp:13-38, 141-262).
``metrics()["compilation_cache"]`` reports the same names, as emulated counts:
no NEFF exists, so sizes and compile times that only a real compiler gives are
not reported.
"""
from __future__ import annotations


def compilation_cache_stats(in_memory_hits: int, persistent_hits: int, compilations: int,
                            in_memory_entries: int) -> dict:
    """Counters under the real product's names (emulated counts).

    A kernel looked up is found in memory (loaded earlier in this process),
    else on disk, else compiled; so in-memory misses are persistent hits plus
    compilations, and every compilation is a persistent miss.
    """
    hits = in_memory_hits + persistent_hits
    looked_up = hits + compilations
    return {
        "total_entries": in_memory_entries,
        "in_memory_hits": in_memory_hits,
        "in_memory_misses": persistent_hits + compilations,
        "persistent_hits": persistent_hits,
        "persistent_misses": compilations,
        "cache_hits": hits,
        "cache_misses": compilations,
        "hit_rate": hits / looked_up if looked_up else 0.0,
        "total_compilations": compilations,
    }
