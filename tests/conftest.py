"""Shared test set-up: offline Hugging Face, a private NEFF cache, seeds."""
import logging
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

import children  # noqa: E402
import torch_neuronx  # noqa: E402,F401  (registers the device even with autoload off)
from torch_neuronx.runtime.profiles import TOPOLOGY_ENV  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def _process_topology():
    env = {name: os.environ.get(name) for name in TOPOLOGY_ENV}
    return (torch.neuron.topology(), torch.neuron.device_count(),
            # The capacity straight from the core: get_device_properties() initialises the
            # runtime, and a check run around every test must not (a later fork would be bad).
            torch_neuronx._C._device_capacity(0), torch.neuron.current_device(), env)


@pytest.fixture(autouse=True)
def _topology_is_restored():
    """A test that re-configures the emulated cores must give them back: a leaked
    topology fails every later test that uses ``neuron:3`` (and hung a CI run).
    The leak is repaired and reported as an error of the test that caused it."""
    before = _process_topology()
    yield
    after = _process_topology()
    if after[1:] == before[1:]:
        return
    topology, _, capacity, device, env = before
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    torch.neuron._configure(topology, capacity)
    torch_neuronx.accounting.reconfigure(topology)
    torch.neuron.set_device(device)
    pytest.fail(f"the test changed the process topology and did not restore it: "
                f"(device_count, capacity, current device, env) {before[1:]} -> {after[1:]}")


@pytest.fixture
def clean_topology_env(monkeypatch):
    """No topology variable set, and every one restored afterwards — also those the code
    under test sets itself (``resolve_topology`` exports NEURON_RT_VISIBLE_CORES under
    torchrun): ``monkeypatch.delenv`` of an unset name would record nothing to undo."""
    for name in TOPOLOGY_ENV:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def neuron_log():
    """Records of the ``torch_neuronx`` logger (it does not propagate to the root logger)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("torch_neuronx")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def pytest_collection_finish(session):
    """Start early what selected tests will wait for: a test module may define
    ``start_early(fixtures)``, called once here with the fixture names its selected tests use,
    for child processes that need nothing from the tests before them: a wait (a child killed by
    its timeout) or work queued on the background lane (``children.Lane``) then passes while
    those tests run. Not on ``--collect-only``."""
    if session.config.option.collectonly:
        return
    fixtures: dict = {}  # module -> fixture names, modules in the order they run
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None:
            fixtures.setdefault(module, set()).update(getattr(item, "fixturenames", ()))
    for module, names in fixtures.items():
        start = getattr(module, "start_early", None)
        if start is not None:
            start(names)


def pytest_sessionfinish(session):
    """A session ended early (``-x``) drops the background jobs not begun."""
    children.background.close()
