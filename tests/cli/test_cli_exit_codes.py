"""Every ``torchneuron`` exit goes through one map (runtime/exit_codes.py), and a bad flag of
any subcommand is the user's error: one line on stderr, exit 2, nothing run or written."""
import signal

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
    (["plan", "llama-3-8b", "--instance", "trn9.huge"], "--instance 'trn9.huge'"),
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
