"""What a script driving ``torchneuron`` relies on beyond the exit codes: ``--json`` output is
strict JSON (no NaN / Infinity), and Ctrl-C is one line and exit 130 even in the first seconds,
while ``torch`` is still importing (``torchneuron_launcher.py``)."""
import json
import os
import signal
import time
from pathlib import Path

import pytest

import children
import torchneuron_launcher
from torch_neuronx.runtime.exit_codes import ExitCode
from torch_neuronx.runtime.profiles import PROFILES

REPO = Path(__file__).resolve().parents[2]


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_info_json_is_strict_json(capsys):
    from torch_neuronx.cli.main import main

    assert main(["info", "--json"]) is ExitCode.SUCCESS
    info = _strict(capsys.readouterr().out)
    assert info["emulated"] is True and info["cores"]


def test_info_json_refuses_a_value_json_cannot_hold(monkeypatch, capsys):
    """A non-finite figure is an error of ours (exit 3 with its traceback), never ``NaN`` in the
    output a script parses."""
    from torch_neuronx.cli import info as info_command
    from torch_neuronx.cli.main import main
    from torch_neuronx.runtime.exit_codes import ExitCode

    collected = info_command.collect()
    monkeypatch.setattr(info_command, "collect", lambda: {**collected, "hbm_per_core_bytes": float("nan")})
    assert main(["info", "--json"]) is ExitCode.INTERNAL_ERROR
    printed = capsys.readouterr()
    assert "NaN" not in printed.out and "not JSON compliant" in printed.err


@pytest.fixture(scope="module")
def info_per_instance():
    """``torchneuron info --json`` under each instance, all started at once (fresh interpreters)."""
    started = {}
    for instance in sorted(PROFILES):
        env = dict(os.environ, TORCHNEURON_INSTANCE=instance, PYTHONPATH=str(REPO))
        env.pop("NEURON_LOGICAL_NC_CONFIG", None)
        started[instance] = children.start(["-m", "torch_neuronx.cli.main", "info", "--json"], env=env)
    yield started
    children.stop(started.values())


@pytest.mark.parametrize("instance", sorted(PROFILES))
def test_info_json_of_every_instance_is_strict(instance, info_per_instance):
    done = children.finished(info_per_instance[instance])
    assert done.returncode == 0, done.stderr
    assert _strict(done.stdout)["instance_type"] == instance


def test_the_launcher_reports_the_maps_interrupted_code():
    assert torchneuron_launcher.INTERRUPTED_WHILE_IMPORTING == ExitCode.INTERRUPTED


def _torch_loaded(pid: int) -> bool:
    """The child has mapped libtorch: it is inside ``import torch``, seconds from done."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_ctrl_c_while_torch_imports_is_one_line_and_130(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = children.start_interruptible(
        ["-c", "import sys, torchneuron_launcher; sys.exit(torchneuron_launcher.main())",
         "pilot", "--out", str(tmp_path / "report")], env=env)
    try:
        deadline = time.monotonic() + 60
        while not _torch_loaded(child.pid) and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.005)
        assert _torch_loaded(child.pid), "the child never started importing torch"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == ExitCode.INTERRUPTED, err
    assert err.strip().splitlines() == ["error: interrupted by SIGINT"], err
    assert "Traceback" not in out + err
