"""Every command names an environment variable it cannot use: one line with the variable and
what it allows, exit 2, and (the pilot) an error report of kind ``configuration`` saying the same.

Each declared variable that refuses some value (``Setting.refused_value`` in
``runtime/settings.py``) is swept through every command in this process: the check is
``cli/main.py``'s, made before any command runs, so the path is the one a user's process
takes. What only a fresh process shows — the bad value present at ``import torch``, deferred
there, then found again by the command, through the ``torchneuron`` console script — is
checked once per command in a child (four children, started together).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import children
from torch_neuronx.cli.main import main
from torch_neuronx.runtime import settings
from torch_neuronx.runtime.profiles import PROFILES, TOPOLOGY_ENV

REFUSED = {s.name: s.refused_value for s in settings.REGISTRY.values() if s.refused_value is not None}
# What the one line says is allowed, for variables whose values are checked where they are used
ALLOWED_BY_NAME = {
    "TORCHNEURON_INSTANCE": ", ".join(PROFILES),
    "NEURON_RT_VISIBLE_CORES": "logical cores (0..",
    "TORCHNEURON_PROJECTION_CALIBRATION": "cannot read calibration file",
}


def _allowed(name: str) -> str:
    spec = settings.setting(name)
    if name in ALLOWED_BY_NAME:
        return ALLOWED_BY_NAME[name]
    return {"flag": "use 1/0, true/false, yes/no or on/off", "int": "integer", "float": "number",
            "choice": ", ".join(spec.choices)}[spec.kind]


def _commands(out: Path) -> dict[str, list[str]]:
    return {"info": ["info"], "plan": ["plan", "llama-3-8b", "--out", str(out / "plan.json")],
            "coverage": ["coverage", "--only", "llama", "--out", str(out / "coverage")],
            "pilot": ["pilot", "--out", str(out / "pilot")]}


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def _check_pilot_report(out: Path, line: str) -> None:
    report = json.loads((out / "report.error.json").read_text())
    assert report["error"]["kind"] == "configuration" and report["status"] == "error"
    assert f"error: {report['error']['message']}" == line
    assert not (out / "report.json").exists()  # a report of a run that did not happen is the error one


def test_every_refusing_setting_is_swept():
    """Typed variables refuse a value by their kind; those read as free text name one explicitly."""
    assert {"TORCHNEURON_64BIT", "TORCHNEURON_INSTANCE", "NEURON_RT_VISIBLE_CORES", "TORCH_NEURONX_LOG_LEVEL",
            "TORCHNEURON_PROJECTION_CALIBRATION", "NEURON_PLATFORM_TARGET_OVERRIDE"} <= set(REFUSED)
    typed = {s.name for s in settings.REGISTRY.values() if s.kind in ("flag", "int", "float", "choice")}
    assert typed <= set(REFUSED)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_every_command_names_the_setting(name, monkeypatch, tmp_path, capsys):
    for variable in TOPOLOGY_ENV:  # only the variable under test is set
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(name, REFUSED[name])
    for command, argv in _commands(tmp_path).items():
        assert main(argv) == 2, command
        line = _one_error_line(capsys.readouterr().err)
        assert f"{name}=" in line and REFUSED[name] in line and _allowed(name) in line, (command, line)
        if command == "pilot":
            _check_pilot_report(tmp_path / "pilot", line)
    assert not (tmp_path / "plan.json").exists() and not (tmp_path / "coverage").exists()


# One child per command, each with a variable read at another point of ``import torch``.
CHILD_CASES = {"pilot": ("TORCHNEURON_64BIT", "maybe"),  # numerics, at import
               "plan": ("NEURON_RT_VISIBLE_CORES", "0-99"),  # the topology, deferred at import
               "coverage": ("TORCHNEURON_HOST_POOL_MB", "many"),  # the C++ core's configuration
               "info": ("TORCH_NEURONX_LOG_LEVEL", "maybe")}  # the logger, set up at import


@pytest.fixture(scope="module")
def console_script_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("config-errors")
    script = str(Path(sys.executable).parent / "torchneuron")
    base = {k: v for k, v in os.environ.items() if k not in TOPOLOGY_ENV}
    started = {command: children.start([script, *_commands(out)[command]],
                                       env={**base, CHILD_CASES[command][0]: CHILD_CASES[command][1]})
               for command in CHILD_CASES}
    try:
        yield out, {command: children.finished(proc, timeout=300) for command, proc in started.items()}
    finally:
        children.stop(started.values())


@pytest.mark.parametrize("command", sorted(CHILD_CASES))
def test_the_console_script_names_the_setting(command, console_script_runs):
    out, runs = console_script_runs
    name, value = CHILD_CASES[command]
    proc = runs[command]
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-3000:])
    line = _one_error_line(proc.stderr)
    assert line.startswith(f"error: {name}={value!r}") and _allowed(name) in line, line
    if command == "pilot":
        _check_pilot_report(out / "pilot", line)


def test_run_pilot_names_a_setting_deferred_at_import(tmp_path, monkeypatch):
    """``run_pilot`` from Python (no command line): the deferred error is the setting's, not
    "device 'neuron' is not available"."""
    import io

    from rich.console import Console

    from torch_neuronx import neuron
    from torch_neuronx.pilot import PilotConfig, run_pilot
    from torch_neuronx.pilot.console import PilotConsole
    from torch_neuronx.runtime.errors import ConfigError

    error = ConfigError("TORCHNEURON_64BIT='maybe' is not one of off, narrow, strict")
    monkeypatch.setattr(neuron, "_config_error", error)
    err = io.StringIO()
    ui = PilotConsole(Console(file=io.StringIO()), Console(file=err, soft_wrap=True))
    assert run_pilot(PilotConfig(out=tmp_path), ui) == 2
    assert err.getvalue().strip() == f"error: {error}"
    report = json.loads((tmp_path / "report.error.json").read_text())
    assert report["error"] == {"kind": "configuration", "message": str(error), "step": None}
