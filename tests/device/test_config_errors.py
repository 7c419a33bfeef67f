"""A bad environment variable never breaks ``import torch``.

Every script imports torch, CPU-only ones included, and the backend autoload
imports us with it: a bad value of one of our variables must let the import
finish and raise the (precise, one-line) ``ConfigError`` where the device is
first used, or at ``init_process_group``. Fresh interpreters: the checks are
about import time.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import children
from torch_neuronx.runtime import settings
from torch_neuronx.runtime.profiles import TOPOLOGY_ENV

_FIRST_USE = """
import torch
from torch_neuronx.runtime.errors import ConfigError
print("imported", torch.ones(2).sum().item())
for use in (lambda: torch.randn(2, device="neuron"), lambda: torch.ones(2).to("neuron"),
            torch.neuron.device_count):  # no count of cores the process cannot use
    try:
        use()
    except ConfigError as exc:
        print("ConfigError:", exc)
    else:
        print("no error")
"""

BAD_VALUES = [
    ({"TORCHNEURON_64BIT": "maybe"}, "TORCHNEURON_64BIT='maybe' is not one of off, narrow, strict"),
    ({"NEURON_RT_VISIBLE_CORES": "99"}, "NEURON_RT_VISIBLE_CORES='99' names core(s) [99]"),
    ({"TORCHNEURON_HOST_POOL_MB": "-5"}, "TORCHNEURON_HOST_POOL_MB='-5' is not a non-negative integer"),
    ({"TORCHNEURON_HOST_POOL_MB": "abc"}, "TORCHNEURON_HOST_POOL_MB='abc' is not a non-negative integer"),
    ({"NEURON_LOGICAL_NC_CONFIG": "4"}, "NEURON_LOGICAL_NC_CONFIG=4 is invalid"),
    ({"TORCH_NEURONX_ENABLE_NKI_SDPA": "perhaps"}, "TORCH_NEURONX_ENABLE_NKI_SDPA='perhaps' is not a boolean"),
    ({"LOCAL_WORLD_SIZE": "9", "LOCAL_RANK": "0"}, "9 ranks per node but trn2.3xlarge with LNC=2 has only 4"),
    ({"NEURON_CC_FLAGS": "--auto-cast fast"},
     "NEURON_CC_FLAGS: --auto-cast value 'fast' is not one of none, matmult, matmul, all"),
]


def _start(code: str, env: dict[str, str]) -> subprocess.Popen:
    # Unset in the children unless a case sets them (a topology of the parent must not leak in).
    full = {k: v for k, v in os.environ.items() if k not in TOPOLOGY_ENV}
    full.update(env)
    return children.start(["-c", code], env=full)


def _finished(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    return children.finished(proc, timeout=180)


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return _finished(_start(code, env))


_GOOD_ENV_USE = _FIRST_USE.replace("ConfigError as exc", "ZeroDivisionError as exc")


@pytest.fixture(scope="module")
def first_uses():
    """The first-use script under each bad value and under a good environment, all started at
    once: each is a fresh ``import torch`` (seconds, on one core) and none depends on another."""
    started = {tuple(env.items()): _start(_FIRST_USE, env) for env, _ in BAD_VALUES}
    started[()] = _start(_GOOD_ENV_USE, {})
    yield started
    children.stop(started.values())


@pytest.mark.parametrize("env,message", BAD_VALUES, ids=lambda v: ",".join(v) if isinstance(v, dict) else None)
def test_import_torch_survives_and_first_device_use_raises(env, message, first_uses):
    proc = _finished(first_uses[tuple(env.items())])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "imported 2.0"
    # Every way to reach the device raises the same error, every time (it is not used up).
    assert len(lines) == 4 and all(line.startswith("ConfigError: ") and message in line for line in lines[1:]), lines


def test_a_good_environment_still_works(first_uses):
    proc = _finished(first_uses[()])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[1:] == ["no error", "no error", "no error"]


def test_bad_variable_raises_at_init_process_group():
    """Too many torchrun ranks for the instance: import works, the group refuses."""
    code = """
import torch, torch.distributed as dist
from torch_neuronx.runtime.errors import ConfigError
try:
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
except ConfigError as exc:
    print("ConfigError:", exc)
"""
    proc = _python(code, {"LOCAL_WORLD_SIZE": "9", "LOCAL_RANK": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ConfigError: 9 ranks per node"), proc.stdout


def test_cli_reports_a_deferred_error_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "torch_neuronx.cli.main", "info"],
                          env=dict(os.environ, TORCHNEURON_64BIT="maybe"), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-2000:])
    assert "TORCHNEURON_64BIT='maybe'" in proc.stderr and "Traceback" not in proc.stderr


def test_defer_bad_values_reads_bad_variables_as_unset(monkeypatch):
    monkeypatch.setattr(settings, "_unusable", set())
    monkeypatch.setenv("TORCHNEURON_HOST_POOL_MB", "-5")
    monkeypatch.setenv("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", "3")
    error = settings.defer_bad_values()
    assert "TORCHNEURON_HOST_POOL_MB='-5'" in str(error)
    assert settings.get_int("TORCHNEURON_HOST_POOL_MB") == 1024  # the declared default
    assert settings.get_float("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL") == 3.0  # good values still read


_CALIBRATION = """
import json, os, sys
import torch
import torch_neuronx
from torch_neuronx import projection
from torch_neuronx.cli.main import main
print("imported", (torch.ones(2, device="neuron") * 2).sum().item())
for name in sys.argv[1:]:
    os.environ["TORCHNEURON_PROJECTION_CALIBRATION"] = name
    projection.configure(*projection.target())  # the next use reads the variable again
    try:
        torch_neuronx.metrics()
    except ValueError as exc:
        print(type(exc).__name__ + ":", str(exc).replace(chr(10), " | "))
    else:
        print("no error")
print("info exit", main(["info"]))
"""
CALIBRATIONS = {  # file name: (text, the end of the one-line error)
    "corrupt.json": ("{bad", "is not valid JSON"),
    "missing.json": (None, "cannot read calibration file missing.json"),
    "negative.json": ('{"schema": 1, "efficiency": {"hbm": -0.5}}', "efficiency.hbm = -0.5 must be in (0, 1]"),
    "nan.json": ('{"schema": 1, "efficiency": {"tensor": NaN}}', "efficiency.tensor must be a finite number, got nan"),
    "inf.json": ('{"schema": 1, "launch_seconds": {"eager": Infinity}}',
                 "launch_seconds.eager must be a finite number, got inf"),
}


def test_bad_calibration_file_never_breaks_import_and_is_one_line_where_used(tmp_path):
    """A calibration file the projection cannot use never breaks ``import torch``, and a NaN one
    never gives NaN device times or a TypeError at the end of a plan: one line where it is used."""
    for name, (text, _) in CALIBRATIONS.items():
        if text is not None:
            (tmp_path / name).write_text(text)
    names = list(CALIBRATIONS)
    proc = subprocess.run([sys.executable, "-c", _CALIBRATION, *names], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180,
                          env={**{k: v for k, v in os.environ.items() if k not in TOPOLOGY_ENV},
                               "TORCHNEURON_PROJECTION_CALIBRATION": "corrupt.json"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "imported 4.0"
    for name, line in zip(names, lines[1:]):
        assert line.startswith(f"ConfigError: TORCHNEURON_PROJECTION_CALIBRATION={name}: "), line
        assert CALIBRATIONS[name][1] in line, line
    assert lines[-1] == "info exit 2"
    assert proc.stderr.strip().splitlines()[-1].startswith("error: TORCHNEURON_PROJECTION_CALIBRATION=inf.json")
    assert "Traceback" not in proc.stderr


def test_an_instance_argument_is_named_not_the_variable_nobody_set(monkeypatch):
    from torch_neuronx.projection import Projector
    from torch_neuronx.runtime.errors import ConfigError

    monkeypatch.delenv("TORCHNEURON_INSTANCE", raising=False)
    with pytest.raises(ConfigError, match=r"^instance 'trn9.huge' is not a known instance profile") as info:
        Projector("trn9.huge")
    assert "TORCHNEURON_INSTANCE" not in str(info.value)
    monkeypatch.setenv("TORCHNEURON_INSTANCE", "trn9.huge")  # the variable, when it is the one used
    with pytest.raises(ConfigError, match=r"^TORCHNEURON_INSTANCE='trn9.huge' is not a known"):
        Projector()
