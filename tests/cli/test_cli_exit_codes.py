"""Every ``torchneuron`` exit goes through one map (runtime/exit_codes.py), and a bad flag of
any subcommand is the user's error: one line on stderr, exit 2, nothing run or written."""
import os
import signal
import time

import pytest

from torch_neuronx.cli.main import main
from torch_neuronx.runtime.errors import ConfigError, UsageError, UserError
from torch_neuronx.runtime.exit_codes import ExitCode, interrupted_by

pytestmark = pytest.mark.fast


def test_the_map_keeps_the_documented_codes():
    # docs/pilot.md, docs/plan.md, docs/coverage.md: scripts depend on these numbers.
    assert {code.name: int(code) for code in ExitCode} == {
        "SUCCESS": 0, "FAILURE": 1, "USER_ERROR": 2, "INTERNAL_ERROR": 3, "INTERRUPTED": 130, "TERMINATED": 143}
    assert interrupted_by(signal.SIGINT) is ExitCode.INTERRUPTED
    assert interrupted_by(signal.SIGTERM) is ExitCode.TERMINATED


def test_a_sigterm_something_swallowed_still_ends_the_block():
    """The handler runs wherever the main thread is; what a broad ``except`` (or a finalizer)
    swallows there is raised again when the block ends, so the command still stops with 143."""
    from torch_neuronx.runtime.interrupts import Terminated, interrupt_signal, sigterm_as_interrupt

    finished, before = False, signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught:
        with sigterm_as_interrupt():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler runs here and its exception is swallowed below
            except BaseException:
                pass
            finished = True
    assert finished and interrupt_signal(caught.value) == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def test_both_kinds_of_user_error_are_one_type():
    assert issubclass(ConfigError, UserError) and issubclass(UsageError, UserError)
    assert not issubclass(UsageError, ConfigError)  # a flag mistake never reads as an environment variable


@pytest.mark.parametrize("argv, named", [
    (["info", "--nonsense"], "unrecognized arguments: --nonsense"),
    (["pilot", "--seq-lens", "8,x"], "--seq-lens"),
    (["pilot", "--batch-size", "two"], "--batch-size"),
    (["coverage", "--jobs", "many"], "--jobs"),
    (["coverage", "--limit", "0"], "--limit must be at least 1"),
    (["plan", "llama-3-8b", "--tp", "x"], "--tp"),
    (["plan", "llama-3-8b", "--instance", "trn9.huge"], "--instance: 'trn9.huge' is not one of"),
    (["nonsense-command"], "invalid choice: 'nonsense-command'"),
])
def test_a_bad_flag_is_one_line_and_exit_2(argv, named, tmp_path, capsys):
    out = tmp_path / "out"
    code = main([*argv, "--out", str(out)] if argv[0] in ("pilot", "coverage") else argv)
    assert type(code) is ExitCode and code == ExitCode.USER_ERROR == 2
    printed = capsys.readouterr()
    lines = printed.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], printed.err
    assert "Traceback" not in printed.out + printed.err
    assert not out.exists()  # checked before anything ran


def test_no_command_prints_the_help_and_is_a_user_error(capsys):
    assert main([]) is ExitCode.USER_ERROR
    assert "COMMAND" in capsys.readouterr().out


def test_a_successful_command_exits_through_the_map(capsys):
    assert main(["info", "--json"]) is ExitCode.SUCCESS
    assert capsys.readouterr().out.lstrip().startswith("{")


def test_a_bug_in_a_command_is_its_traceback_and_exit_3(monkeypatch, capsys):
    import torch_neuronx.cli.info as info

    def broken(args):
        raise RuntimeError("a bug in the command")

    monkeypatch.setattr(info, "run", broken)
    assert main(["info"]) is ExitCode.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug in the command" in err
    assert err.rstrip().splitlines()[-1].startswith("error: internal error")


# ---------------------------------------------------------------- a bad flag loses nothing
def _files(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


PLAN_BAD_FLAGS = [["--tp", "x"], ["--instance", "trn9.huge"], ["--nonsense"], ["--price-per-hour", "nan"]]
COVERAGE_BAD_FLAGS = [["--only", "not_a_model"], ["--jobs", "0"], ["--device", "cuda"], ["--instance", "trn9.huge"],
                      ["--layers", "0"]]


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def test_a_bad_plan_flag_after_a_good_plan_leaves_its_files(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "bert-large-uncased", "--seq-len", "128", "--out", str(out)]) == ExitCode.SUCCESS
    good = _files(tmp_path)
    assert set(good) == {"plan.json", "plan.html"}
    for bad in PLAN_BAD_FLAGS:
        capsys.readouterr()
        assert main(["plan", "bert-large-uncased", "--out", str(out), *bad]) == ExitCode.USER_ERROR, bad
        assert _files(tmp_path) == good, bad
        assert len(_error_lines(capsys.readouterr().err)) == 1, bad


def test_a_bad_coverage_flag_after_a_good_sweep_leaves_its_files(tmp_path, capsys):
    """The good sweep is one whose architectures are all in its log already (no worker starts)."""
    import json

    from torch_neuronx.coverage.probe import CHECKS
    from torch_neuronx.coverage.sweep import ResultLog

    passed = {c: {"ok": True} for c in CHECKS}
    result = {"model_type": "llama", "status": "pass", "device_checks": passed, "cpu": passed}
    ResultLog(tmp_path / "results.jsonl", {"device": "neuron", "lowering": True, "compiled": False},
              resume=False).add(result)
    assert main(["coverage", "--only", "llama", "--resume", "--out", str(tmp_path)]) == ExitCode.SUCCESS
    good = _files(tmp_path)
    assert json.loads(good["coverage.json"])["results"] == [result]
    for bad in COVERAGE_BAD_FLAGS:
        capsys.readouterr()
        assert main(["coverage", "--only", "llama", "--out", str(tmp_path), *bad]) == ExitCode.USER_ERROR, bad
        assert _files(tmp_path) == good, bad
        assert len(_error_lines(capsys.readouterr().err)) == 1, bad
