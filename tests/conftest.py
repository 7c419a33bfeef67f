"""Shared test set-up: offline Hugging Face, a private NEFF cache, seeds."""
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A private NEFF cache (docs/fidelity.md): tests never touch the user's cache dir.
os.environ.setdefault("TORCH_NEURONX_NEFF_CACHE_DIR", tempfile.mkdtemp(prefix="torchneuron-test-neff-"))

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_neuronx  # noqa: E402,F401  (registers the device even with autoload off)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def neuron_log():
    """Records of the ``torch_neuronx`` logger (it does not propagate to the root logger, so
    pytest's ``caplog`` does not see them)."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("torch_neuronx")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
