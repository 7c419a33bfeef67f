"""Shared test set-up: offline Hugging Face, a private NEFF cache, seeds."""
import atexit
import contextlib
import logging
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A private NEFF cache (docs/fidelity.md): tests never touch the user's cache dir. The session
# that makes it removes it at exit (child processes inherit the variable and leave it be): it
# holds Inductor's ~150 MB precompiled header, so every run used to leave one behind in /tmp.
if "TORCH_NEURONX_NEFF_CACHE_DIR" not in os.environ:
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchneuron-test-neff-")
    # Registered before torch_neuronx is imported, so it runs after the library's exit handlers.
    atexit.register(shutil.rmtree, os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

import children  # noqa: E402
import torch_neuronx  # noqa: E402,F401  (registers the device even with autoload off)
from torch_neuronx.accounting import use_neff_cache  # noqa: E402
from torch_neuronx.runtime.profiles import TOPOLOGY_ENV  # noqa: E402


@contextlib.contextmanager
def _neff_cache_aside(directory):
    use_neff_cache(directory)
    try:
        yield directory
    finally:
        use_neff_cache(os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"])


@pytest.fixture(scope="session")
def own_neff_cache():
    """``with own_neff_cache(directory):`` accounts against ``directory`` (``None``: no cache), with
    nothing compiled yet, as in a new process, then against the session's cache again. Session-scoped,
    so that a fixture of any scope can use it."""
    return _neff_cache_aside


@pytest.fixture
def private_neff_cache(tmp_path, own_neff_cache):
    """An empty NEFF cache of the test's own (``own_neff_cache``). The background lane's children
    write the session's cache while tests run, so a test that counts entries on disk must use its own."""
    with own_neff_cache(tmp_path / "neff") as directory:
        yield directory


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


def _on_an_xdist_worker(config) -> bool:
    """A pytest-xdist worker (``make test XDIST=1``): the workers are the parallelism, so each runs
    its share of the tests as written, with no background lane and no child pytest."""
    return hasattr(config, "workerinput")


def _runs_in_a_child(item) -> bool:
    """A test of a ``child_process`` module, seen by the parent session."""
    return (item.get_closest_marker("child_process") is not None and not os.environ.get(children.IN_CHILD_ENV)
            and not _on_an_xdist_worker(item.config))


def _waits_for_the_lane(item) -> bool:
    """A test using a lane fixture (``children.lane_fixture``): it takes a background job's outcome."""
    return children.uses_lane(item.module.__name__, item.fixturenames) if hasattr(item, "module") else False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The modules whose tests take background-lane outcomes after the others, and
    ``child_process`` modules last: pytest's own process would otherwise stand idle in a
    fixture's set-up waiting for a lane job it reached too early (up to 30 s each). Last of the
    hooks, so that a test ``-m`` deselects puts no module late."""
    if _on_an_xdist_worker(config):
        return
    by_module: dict = {}  # module -> does any of its selected tests wait for the lane
    for item in items:
        key = getattr(item, "module", None)
        by_module[key] = by_module.get(key, False) or _waits_for_the_lane(item)
    # stable: modules keep their order within each group
    items.sort(key=lambda item: (_runs_in_a_child(item), by_module[getattr(item, "module", None)]))


def pytest_collection_finish(session):
    """Start early what selected tests will wait for, for child processes that need nothing
    from the tests before them: a ``child_process`` module's selected tests in one child
    pytest, the jobs of a module's lane fixtures (``children.lane_fixture``), and whatever the
    module's own ``start_early(fixtures)`` starts (called once here with the fixture names its
    selected tests use: a wait, a child killed by its timeout). Not on ``--collect-only``.

    The lane (``children.Lane``) runs the child pytests first (the longest jobs, read last),
    then the lane fixtures' jobs in the reverse of the order their tests first use them (modules
    in the reverse of the order they run, and so the fixtures within one): pytest's own process,
    once through the other modules, takes the jobs the lane has not begun and runs them itself
    (``Lane.take``) while the lane works from the other end, so neither core waits for the
    other until they meet."""
    if session.config.option.collectonly or _on_an_xdist_worker(session.config):
        return
    fixtures: dict = {}  # module -> its fixture names in the order first used, modules in the order they run
    in_child: dict = {}  # child_process module -> its selected test ids
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None:
            fixtures.setdefault(module, {}).update(dict.fromkeys(getattr(item, "fixturenames", ())))
            if _runs_in_a_child(item):
                in_child.setdefault(module, []).append(item.nodeid)
    for module, nodeids in in_child.items():
        children.background.queue(_child_key(module), children.child_pytest,
                                   _child_arguments(session.config, nodeids))
    for module, names in reversed(fixtures.items()):
        children.queue_lane_jobs(module.__name__, reversed(names))
    for module, names in fixtures.items():
        start = getattr(module, "start_early", None)
        if start is not None:
            start(set(names))


def _child_key(module) -> tuple[str, str]:
    return ("child pytest", module.__name__)


def _child_arguments(config, nodeids: list[str]):
    return lambda: (config.rootpath, nodeids, dict(os.environ))


_child_outcomes: dict = {}  # child_process module name -> its child pytest's outcomes


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A ``child_process`` module's test, in the parent session: the outcome its child pytest
    reported (the child ran the test as written, its assertions and all), with the child's
    text on failure. Run alone, the child runs just this test."""
    if not _runs_in_a_child(pyfuncitem):
        return None
    module = pyfuncitem.module.__name__
    if module not in _child_outcomes:
        _child_outcomes[module] = children.background.take(_child_key(pyfuncitem.module), children.child_pytest,
                                                           _child_arguments(pyfuncitem.config, [pyfuncitem.nodeid]))
    outcomes = _child_outcomes[module]
    outcome, text = outcomes.get(pyfuncitem.name, outcomes[None])
    if outcome == "skipped":
        pytest.skip(text)
    if outcome == "xfailed":
        pytest.xfail(text)
    if outcome != "passed":
        pytest.fail(f"in a child pytest:\n{text}", pytrace=False)
    return True


def pytest_sessionfinish(session):
    """A session ended early (``-x``) drops the background jobs not begun."""
    children.background.close()
