"""The Transformers test device spec, loaded the way Transformers loads it (TRANSFORMERS_TEST_DEVICE_SPEC).

Transformers reads the variable once, when ``transformers.testing_utils`` is
imported, so each check runs in a fresh interpreter with the environment a
user sets, and the spec linked into the working directory as documented.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import children
from torch_neuronx.testing import transformers_device_spec

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, torch
import transformers.testing_utils as tu

out = {"torch_device": tu.torch_device, "count": tu.backend_device_count("neuron"),
       "neuron_count": torch.neuron.device_count()}

tu.backend_manual_seed("neuron", 1234)
first = torch.randn(6, device="neuron")
out["core_seed"] = torch.neuron.initial_seed()
tu.backend_manual_seed("neuron", 1234)
second = torch.randn(6, device="neuron")
torch.manual_seed(1234)
cpu = torch.randn(6)
out["seed_repeats"] = torch.equal(first.cpu(), second.cpu())
out["device_draw_equals_cpu_draw"] = torch.equal(first.cpu(), cpu)
out["draw_device"] = first.device.type

tu.backend_empty_cache("neuron")
tu.backend_synchronize("neuron")
tu.backend_reset_peak_memory_stats("neuron")
before = tu.backend_memory_allocated("neuron")
block = torch.empty(1 << 20, dtype=torch.float32, device="neuron")
out["allocated_delta"] = tu.backend_memory_allocated("neuron") - before
out["allocated_matches"] = tu.backend_memory_allocated("neuron") == torch.neuron.memory_allocated()
del block
out["peak_delta"] = tu.backend_max_memory_allocated("neuron") - before
tu.backend_reset_max_memory_allocated("neuron")
out["peak_after_reset"] = tu.backend_max_memory_allocated("neuron") - before
out["accelerator_module"] = tu.backend_torch_accelerator_module("neuron") is torch.neuron
print("RESULT " + json.dumps(out))
"""


def _start(code: str, cwd: Path, spec: str, device: str | None = "neuron") -> subprocess.Popen:
    env = dict(os.environ, TRANSFORMERS_TEST_DEVICE_SPEC=spec, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("TRANSFORMERS_TEST_DEVICE", None)
    if device:
        env["TRANSFORMERS_TEST_DEVICE"] = device
    return children.start(["-c", code], env=env, cwd=cwd)


def _finished(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    return children.finished(proc, timeout=240)


@pytest.fixture(scope="module")
def linked_spec(tmp_path_factory) -> Path:
    """The documented set-up: the spec file linked into the directory pytest runs from."""
    printed = subprocess.run([sys.executable, "-m", "torch_neuronx.testing.transformers_device_spec"],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout.strip()
    assert Path(printed).resolve() == Path(transformers_device_spec.__file__).resolve()
    folder = tmp_path_factory.mktemp("spec")
    (folder / "neuron_spec.py").symlink_to(printed)
    return folder


@pytest.fixture(scope="module")
def runs(linked_spec):
    """Each test's interpreter, all started at once: each imports Transformers' test utilities
    (seconds, on one core), and none depends on another."""
    started = {
        "helpers": _start(PROBE, linked_spec, "neuron_spec.py"),
        "mismatch": _start("import transformers.testing_utils", linked_spec, "neuron_spec.py", device="cpu"),
        "path": _start("import transformers.testing_utils", linked_spec, str(linked_spec / "neuron_spec.py")),
    }
    yield started
    children.stop(started.values())


def test_transformers_helpers_act_on_the_neuron_device(runs):
    done = _finished(runs["helpers"])
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert out["torch_device"] == "neuron"
    assert out["count"] == out["neuron_count"] >= 1
    # Seeding: the device draws repeat, and are the CPU generator's draws (as on the real product);
    # every core's own generator is seeded too.
    assert out["draw_device"] == "neuron"
    assert out["seed_repeats"] and out["device_draw_equals_cpu_draw"]
    assert out["core_seed"] == 1234
    # The tables Transformers' loader skips are filled: real per-core memory figures, not 0.
    assert out["allocated_delta"] == 4 << 20
    assert out["allocated_matches"]
    assert out["peak_delta"] >= 4 << 20
    assert out["peak_after_reset"] < 4 << 20
    assert out["accelerator_module"]


def test_spec_name_and_device_mismatch_is_refused_by_transformers(runs):
    """``TRANSFORMERS_TEST_DEVICE=cpu`` with the neuron spec: Transformers' own clear error."""
    done = _finished(runs["mismatch"])
    assert done.returncode != 0
    assert "Mismatch between environment variable `TRANSFORMERS_TEST_DEVICE` 'cpu'" in done.stderr


def test_a_path_with_a_directory_fails_in_transformers(runs, linked_spec):
    """Why docs/huggingface.md says to link the file: Transformers imports the path minus ``.py``
    as a module name. When this starts passing, Transformers has fixed it and the docs can say so."""
    done = _finished(runs["path"])
    assert done.returncode != 0
    assert f"No module named '{linked_spec / 'neuron_spec'}'" in done.stderr

