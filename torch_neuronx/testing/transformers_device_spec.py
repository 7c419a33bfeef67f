"""The device spec that runs Transformers' own test suite on ``neuron`` (``TRANSFORMERS_TEST_DEVICE_SPEC``).

``transformers.testing_utils`` imports this file while it is itself being
imported and maps its per-device helper tables to what the file names:
``DEVICE_NAME`` and ``MANUAL_SEED_FN`` / ``EMPTY_CACHE_FN`` / ``DEVICE_COUNT_FN``.
Its loader reads only those three functions; its other tables (memory
statistics, ``synchronize``, the accelerator module) fall back to ``0`` /
``None`` for a device it does not know, so memory tests would compare zeros.
:func:`register_remaining_tables` fills them from the same module.

Transformers imports the spec by the file name without ``.py`` *as given*, so
the variable must name a file in the directory pytest runs from, without a
directory part (``/abs/path/spec.py`` fails with ``No module named
'/abs/path/spec'``). ``python -m torch_neuronx.testing.transformers_device_spec``
prints this file's path, to link next to the suite (docs/huggingface.md)::

    ln -sf "$(python -m torch_neuronx.testing.transformers_device_spec)" neuron_spec.py
    TRANSFORMERS_TEST_DEVICE=neuron TRANSFORMERS_TEST_DEVICE_SPEC=neuron_spec.py pytest tests/models/llama
"""
from __future__ import annotations

import sys

import torch

import torch_neuronx  # noqa: F401  (defines torch.neuron even when the backend autoload is off)

DEVICE_NAME = "neuron"

# ``torch.manual_seed``, not ``torch.neuron.manual_seed``: a test seeds the CPU draws it compares
# against and the device draws together, and ``torch.manual_seed`` seeds the CPU generator and
# every core's generator (docs/device.md, "Random numbers").
MANUAL_SEED_FN = torch.manual_seed
EMPTY_CACHE_FN = torch.neuron.empty_cache
DEVICE_COUNT_FN = torch.neuron.device_count

# The tables Transformers' loader does not read from a spec file (name in testing_utils → function).
REMAINING_TABLES = {
    "BACKEND_RESET_MAX_MEMORY_ALLOCATED": torch.neuron.reset_peak_memory_stats,
    "BACKEND_RESET_PEAK_MEMORY_STATS": torch.neuron.reset_peak_memory_stats,
    "BACKEND_MAX_MEMORY_ALLOCATED": torch.neuron.max_memory_allocated,
    "BACKEND_MEMORY_ALLOCATED": torch.neuron.memory_allocated,
    "BACKEND_SYNCHRONIZE": torch.neuron.synchronize,
    "BACKEND_TORCH_ACCELERATOR_MODULE": torch.neuron,
}


def register_remaining_tables() -> list[str]:
    """Add ``neuron`` to the tables of ``transformers.testing_utils`` that the spec loader skips.

    Runs when ``testing_utils`` imports this file (its tables exist by then);
    returns the names of the tables it filled (none when imported otherwise).
    """
    testing_utils = sys.modules.get("transformers.testing_utils")
    filled = []
    for table_name, function in REMAINING_TABLES.items():
        table = getattr(testing_utils, table_name, None)
        if isinstance(table, dict):
            table[DEVICE_NAME] = function
            filled.append(table_name)
    return filled


register_remaining_tables()

if __name__ == "__main__":
    print(__file__)
