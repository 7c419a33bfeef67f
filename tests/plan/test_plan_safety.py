"""``torchneuron plan`` under bad input, a full disk and interrupts: every argument
checked before any work (one line, exit 2), only the files the user named written, never the
model config nor a file another tool wrote (without ``--force``), outputs published whole,
SIGINT / SIGTERM exit 130 / 143 with the previous plan intact."""
from __future__ import annotations

import json
import math
import os
import signal
import time

import pytest

import children
from torch_neuronx.cli.main import main
from torch_neuronx.plan import Planner
from torch_neuronx.plan.render import json_text
from torch_neuronx.projection import Projector
from torch_neuronx.testing.tiny_models import tiny_config

# Seconds of plans and interrupted child processes needing nothing from other tests: in a child
# pytest on the background lane.
pytestmark = pytest.mark.child_process

TINY = ["--instance", "trn2.3xlarge", "--seq-len", "32"]


@pytest.fixture
def model(tmp_path):
    """A tiny Llama checkpoint directory (context 256 tokens)."""
    tiny_config("llama").save_pretrained(tmp_path / "model")
    return tmp_path / "model"


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a plan gets computed: bad input must be refused before any work."""
    def computed(*_):
        raise AssertionError("the plan was computed before the input was refused")
    monkeypatch.setattr(Planner, "plan", computed)


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def _one_line_error(capsys) -> str:
    return _one_line(capsys.readouterr().err)


def _plan(model, out, *extra) -> int:
    return main(["plan", str(model), *TINY, "--out", str(out), *extra])


def _files(folder) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_out_never_replaces_the_model_config(model, no_work, capsys):
    config = model / "config.json"
    before = config.read_bytes()
    for target in (model, config):  # planning the directory or the file itself
        assert main(["plan", str(target), "--out", str(config), "--force"]) == 2
        assert "is the model config being planned" in _one_line_error(capsys)
    assert config.read_bytes() == before


def test_out_not_ending_in_json_writes_that_file_only(model, tmp_path, capsys):
    page = tmp_path / "important.html"
    page.write_text("the user's page")
    assert _plan(model, tmp_path / "important.txt") == 0
    assert json.loads((tmp_path / "important.txt").read_text())["model"] == str(model)
    assert page.read_text() == "the user's page"
    said = capsys.readouterr().out.replace("\n", "")  # rich wraps long paths
    assert said.endswith("wrote " + str(tmp_path / "important.txt")) and "important.html" not in said


def test_a_file_plan_did_not_write_is_replaced_only_with_force(model, tmp_path, capsys):
    mine = tmp_path / "important.txt"
    mine.write_text("hello")
    assert _plan(model, mine) == 2
    assert "was not written by torchneuron plan; pass --force" in _one_line_error(capsys)
    assert mine.read_text() == "hello"
    assert _plan(model, mine, "--force") == 0
    assert "memory" in json.loads(mine.read_text())
    # the page beside a .json --out counts too
    (tmp_path / "plan.html").write_text("<p>someone else's page</p>")
    assert _plan(model, tmp_path / "plan.json") == 2
    assert "the page beside --out" in _one_line_error(capsys)
    assert not (tmp_path / "plan.json").exists()


def test_a_rerun_replaces_its_own_plan_and_page(model, tmp_path):
    out = tmp_path / "plan.json"
    assert _plan(model, out) == 0
    assert _plan(model, out, "--batch-size", "2") == 0
    assert json.loads(out.read_text())["layout"]["batch"] == 2
    assert "TorchNeuron plan" in (tmp_path / "plan.html").read_text()
    assert _files(tmp_path) == {"model", "plan.json", "plan.html"}  # no staging file left


@pytest.mark.parametrize("where, message", [
    ("a-file/plan.json", "cannot be created: "),
    ("/proc/plan.json", "cannot be written in /proc"),
    ("a-folder", "is an existing directory, not a file"),
])
def test_out_is_checked_before_any_work(model, tmp_path, monkeypatch, no_work, capsys, where, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder").mkdir()
    assert _plan(model, where) == 2
    assert message in _one_line_error(capsys)


@pytest.mark.parametrize("args, message", [
    (["--price-per-hour", "-1"], "--price-per-hour must be a positive, finite number"),
    (["--price-per-hour", "nan"], "--price-per-hour must be a positive, finite number"),
    (["--price-per-hour", "inf"], "--price-per-hour must be a positive, finite number"),
    (["--batch-size", "1000000000000"], "tokens per rank per step"),
    (["--seq-len", "100000000000000"], "--seq-len 100,000,000,000,000 is above the limit"),
    (["--infer", "--decode-tokens", "100000000000000"], "--decode-tokens 100,000,000,000,000 is above"),
    (["--instance", "trn9.bogus"], "--instance: 'trn9.bogus' is not one of trn1.2xlarge, trn1.32xlarge"),
])
def test_bad_argument_is_one_line_before_any_work(model, tmp_path, no_work, capsys, args, message):
    assert main(["plan", str(model), "--out", str(tmp_path / "plan.json"), *args]) == 2
    err = _one_line_error(capsys)
    assert message in err and "TORCHNEURON_INSTANCE" not in err
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize("edit, message", [
    ({"num_attention_heads": 0}, "num_attention_heads = 0 must be a whole number >= 1"),
    ({"num_hidden_layers": -2}, "num_hidden_layers = -2 must be a whole number >= 1"),
    ({"model_type": None}, 'has no "model_type"'),
])
def test_broken_model_config_is_one_short_line(model, tmp_path, no_work, capsys, edit, message):
    config = json.loads((model / "config.json").read_text())
    config.update(edit)
    (model / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    assert _plan(model, tmp_path / "plan.json") == 2
    err = _one_line_error(capsys)
    assert message in err and len(err) < 300


def test_seq_len_past_the_model_context_warns(model, tmp_path, capsys):
    assert main(["plan", str(model), "--instance", "trn2.3xlarge", "--seq-len", "512",
                 "--out", str(tmp_path / "plan.json")]) == 0
    err = capsys.readouterr().err
    assert "warning: 512 tokens per sequence is past the model's context of 256" in err
    assert _plan(model, tmp_path / "plan.json") == 0
    assert "warning" not in capsys.readouterr().err  # 32 tokens: within the context


def test_full_disk_keeps_the_previous_plan_and_leaves_no_partial_file(model, tmp_path):
    """The file-size limit stands in for a full disk: writes past 16 KiB fail with an OSError
    (EFBIG instead of ENOSPC), and the page with its embedded chart is larger than that. The
    limited run is a child process: the limit holds for a whole process."""
    out = tmp_path / "plan.json"
    assert _plan(model, out) == 0
    before = {name: (tmp_path / name).read_bytes() for name in ("plan.json", "plan.html")}
    done = children.run_with_file_limit(16 * 1024, ["-m", "torch_neuronx.cli.main", "plan", str(model), *TINY,
                                                    "--out", str(out), "--batch-size", "2"])
    assert done.returncode == 2, done.stderr
    # A fresh process: nothing but the one error line (no notice from Transformers either).
    err = _one_line(done.stderr)
    assert f"cannot write {tmp_path / 'plan.html'}" in err and "kept as before" in err
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert _files(tmp_path) == {"model", "plan.json", "plan.html"}


_SLOW_PLAN = """
import sys, time
from torch_neuronx.plan import Planner
def slow(self, layout, suggest=True):
    print("planning", flush=True)
    time.sleep(60)
Planner.plan = slow
from torch_neuronx.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_exits_128_plus_signal_with_previous_plan_intact(model, tmp_path, signum):
    out = tmp_path / "plan.json"
    assert _plan(model, out) == 0
    before = out.read_bytes()
    proc = children.start_interruptible(["-c", _SLOW_PLAN, "plan", str(model), *TINY, "--out", str(out)])
    try:
        assert proc.stdout.readline() == "planning\n"
        time.sleep(0.2)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum
    name = signal.Signals(signum).name
    assert err == f"error: interrupted by {name}; {out} and {tmp_path / 'plan.html'} kept as before\n"
    assert out.read_bytes() == before
    assert _files(tmp_path) == {"model", "plan.json", "plan.html"}


def test_json_is_strict_and_cost_refuses_a_non_finite_price():
    with pytest.raises(ValueError):
        json_text({"time": {"mfu": math.nan}})
    projector = Projector("trn2.3xlarge")
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="price_per_hour"):
            projector.cost(1.0, price_per_hour=bad)
    assert projector.cost(3600.0, price_per_hour=2.0).run_usd == pytest.approx(2.0)


def test_staging_helpers_publish_whole_files(tmp_path):
    """The shared writer: nothing is published when the block fails half-way."""
    from torch_neuronx.runtime.staged_files import StagedFiles

    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(RuntimeError):
        with StagedFiles() as files:
            files.write_text(tmp_path / "a.txt", "new a")
            files.write_text(tmp_path / "sub" / "b.txt", "new b")
            raise RuntimeError("stopped before publishing")
    assert (tmp_path / "a.txt").read_text() == "old a" and not (tmp_path / "sub" / "b.txt").exists()
    assert _files(tmp_path) == {"a.txt", "sub"} and not os.listdir(tmp_path / "sub")


def test_an_interrupt_waits_for_the_files_being_published():
    """Publishing is never cut half-way: SIGINT/SIGTERM are held back until the renames are done."""
    from torch_neuronx.runtime.interrupts import signals_held

    reached = False
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached = True
    assert reached
