"""`torchneuron pilot` under bad input and interrupts: never PASSED for the wrong model, never a user's file lost.

Each test reproduces one case of bad input or interruption; the bad-input ones stop before any model runs.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

import children

from torch_neuronx.cli.main import main
from torch_neuronx.pilot import PilotConfig, run_pilot
from torch_neuronx.pilot import fresh_process
from torch_neuronx.pilot.console import PilotConsole
from torch_neuronx.pilot.output import INTERRUPTED, STAGING_PREFIX
from torch_neuronx.pilot.report import validate_report
from torch_neuronx.pilot.steps import cost, numerics
from torch_neuronx.testing.tiny_models import TinySize, byte_tokenizer, tiny_causal_lm

# Seconds of pilots and interrupted child processes needing nothing from other tests: in a child
# pytest on the background lane.
pytestmark = pytest.mark.child_process

REPO = Path(__file__).resolve().parents[2]
MINIMAL = ["--batch-size", "1", "--seq-lens", "8", "--gen-tokens", "2", "--iters", "2", "--train-steps", "0"]


def _strict_json(path: Path) -> dict:
    return json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{path} holds bare {c}"))


def _llama_checkpoint(path: Path, tokenizer=None) -> Path:
    tiny_causal_lm("llama", TinySize(hidden=32, intermediate=64, vocab=128)).save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def _quiet() -> tuple[PilotConsole, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return PilotConsole(Console(file=out, width=200), Console(file=err, soft_wrap=True)), out, err


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


# ---------------------------------------------------------------- the wrong model never passes
def test_a_checkpoint_without_its_lm_head_is_not_a_causal_lm(tmp_path, capsys):
    from transformers import BertConfig, BertModel

    ckpt = tmp_path / "bert"
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         vocab_size=64)).save_pretrained(ckpt)
    assert main(["pilot", str(ckpt), "--out", str(tmp_path / "out"), *MINIMAL]) == 2
    report = _strict_json(tmp_path / "out" / "report.error.json")
    assert report["error"]["kind"] == "not_causal_lm" and report["status"] == "error"
    assert "cls.predictions" in report["error"]["message"]  # the missing head, named
    assert "pooler.dense" in report["error"]["message"]  # and the unused weights
    assert len(_error_lines(capsys.readouterr().err)) == 1


def test_a_tokenizer_that_cannot_encode_the_text_fails_the_run(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel(vocab={"<unk>": 0, "hello": 1}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    ckpt = _llama_checkpoint(tmp_path / "model", PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>"))
    assert main(["pilot", str(ckpt), "--out", str(tmp_path / "out"), *MINIMAL]) == 2
    report = _strict_json(tmp_path / "out" / "report.error.json")
    assert report["error"]["kind"] == "bad_tokenizer" and report["error"]["step"] == "inputs"
    assert "unknown token" in report["error"]["message"]


def test_a_truncated_tokenizer_falls_back_visibly_and_an_oom_in_the_last_step_keeps_what_ran(tmp_path, monkeypatch):
    ckpt = _llama_checkpoint(tmp_path / "model", byte_tokenizer(128))
    tokenizer_json = ckpt / "tokenizer.json"
    tokenizer_json.write_text(tokenizer_json.read_text()[:200])
    # the fresh process's work, in this process (the subject here is the report, not the interpreter)
    monkeypatch.setattr(fresh_process, "run_in_child", lambda request, timeout: fresh_process.run(request))

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("out of memory (test)")

    monkeypatch.setattr(cost, "run", oom)
    ui, out, err = _quiet()
    cfg = PilotConfig(model=str(ckpt), batch_size=1, seq_lens=(8,), gen_tokens=2, iters=2, train_steps=1,
                      out=tmp_path / "out")
    assert run_pilot(cfg, ui) == 2
    report = _strict_json(tmp_path / "out" / "report.error.json")
    validate_report(report)
    assert report["error"]["kind"] == "out_of_memory" and report["error"]["step"] == "cost"
    steps = report["steps"]
    # every step that completed before the OOM keeps its result
    for name in ("inputs", "numerics", "quality", "finetune", "checkpoint", "compilation", "performance", "profile"):
        assert steps[name]["status"] == "passed", (name, steps[name]["summary"])
    assert steps["cost"]["status"] == "error"
    note = steps["inputs"]["data"]["tokenizer_note"]
    assert "tokenizer.json" in note and "byte-level" in note and note in steps["inputs"]["summary"]
    assert "byte-level tokenizer" in out.getvalue()  # said on the console too
    assert len(_error_lines(err.getvalue())) == 1 and "error:" not in out.getvalue()


# ---------------------------------------------------------------- numbers must be finite, JSON strict
@pytest.mark.parametrize("option, value", [("--price-per-hour", "nan"), ("--price-per-hour", "inf"),
                                           ("--price-per-hour", "-inf"), ("--hbm-per-core", "nan")])
def test_non_finite_numbers_are_rejected(tmp_path, capsys, option, value):
    assert main(["pilot", "--out", str(tmp_path), f"{option}={value}"]) == 2
    report = _strict_json(tmp_path / "report.error.json")
    assert report["error"]["kind"] == "bad_input" and option in report["error"]["message"]
    assert "finite" in _error_lines(capsys.readouterr().err)[0]


# ---------------------------------------------------------------- the user's files are never destroyed
def _listing(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["inside", "same", "contains"])
def test_out_never_touches_the_model_directory(tmp_path, capsys, where):
    ckpt = _llama_checkpoint(tmp_path / "run" / "checkpoint")
    before = _listing(ckpt)
    out = {"inside": ckpt / "report", "same": ckpt, "contains": tmp_path / "run"}[where]
    assert main(["pilot", str(ckpt), "--out", str(out), "--dtype", "bfloat16", *MINIMAL]) == 2
    assert _listing(ckpt) == before  # not one byte changed, nothing added
    errors = _error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and "model directory" in errors[0]
    assert len(errors[0]) > 80  # a long message stays on one line (no wrapping at 80 columns)


@pytest.mark.parametrize("case", ["existing file", "under a file", "uncreatable"])
def test_an_unusable_out_is_one_line_before_anything_runs(tmp_path, capsys, case):
    a_file = tmp_path / "file.txt"
    a_file.write_text("keep me")
    out = {"existing file": a_file, "under a file": a_file / "report",
           "uncreatable": Path("/proc/torchneuron-pilot-test/report")}[case]
    assert main(["pilot", "--out", str(out), *MINIMAL]) == 2
    printed = capsys.readouterr()
    assert "Traceback" not in printed.out + printed.err
    assert len(_error_lines(printed.err)) == 1 and "--out" in printed.err
    assert printed.out == ""  # checked first: no progress, no table
    assert a_file.read_text() == "keep me"


def _previous_run(out: Path) -> dict:
    out.mkdir(parents=True)
    (out / "report.json").write_text('{"status": "passed", "previous": true}')
    (out / "report.html").write_text("<html>previous PASSED</html>")
    return _listing(out)


def test_an_interrupt_keeps_the_previous_report_and_writes_the_partial_one_beside_it(tmp_path, monkeypatch):
    out = tmp_path / "out"
    before = _previous_run(out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(numerics, "run", interrupted)
    ui, stdout, err = _quiet()
    cfg = PilotConfig(batch_size=1, seq_lens=(8,), gen_tokens=2, iters=2, train_steps=0, out=out)
    assert run_pilot(cfg, ui) == 130
    partial = _strict_json(out / INTERRUPTED)
    assert {k: v for k, v in _listing(out).items() if k != INTERRUPTED} == before
    assert partial["status"] == "interrupted" and partial["exit_code"] == 130
    assert partial["error"] == {"kind": "interrupted", "message": "interrupted by SIGINT during step 'numerics'",
                                "step": "numerics"}
    assert partial["steps"]["inputs"]["status"] == "passed"  # what ran is in the partial report
    assert not list(out.glob(STAGING_PREFIX + "*"))
    assert len(_error_lines(err.getvalue())) == 1 and "Traceback" not in err.getvalue() + stdout.getvalue()


def test_sigterm_during_a_rerun_exits_143_and_keeps_the_previous_report(tmp_path):
    out = tmp_path / "out"
    before = _previous_run(out)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "torch_neuronx.cli.main", "pilot", "--out", str(out), *MINIMAL],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob(f"{STAGING_PREFIX}*/inputs.json")):  # the run is under way
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stdout + stderr
    assert {k: v for k, v in _listing(out).items() if k != INTERRUPTED} == before
    partial = _strict_json(out / INTERRUPTED)
    assert partial["status"] == "interrupted" and partial["error"]["message"].startswith("interrupted by SIGTERM")
    assert not list(out.glob(STAGING_PREFIX + "*"))


def test_a_run_that_stops_on_an_error_keeps_the_last_complete_run(tmp_path):
    """Its report goes beside the previous run's files, which stay byte for byte."""
    out = tmp_path / "out"
    _previous_run(out)
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "model.safetensors").write_bytes(b"weights")
    before = _listing(out)
    ui, _, _ = _quiet()
    cfg = PilotConfig(model="/nonexistent/model", out=out)  # ends at once with an error report
    assert run_pilot(cfg, ui) == 2
    assert {k: v for k, v in _listing(out).items() if not k.startswith("report.error.")} == before
    assert _strict_json(out / "report.error.json")["error"]["kind"] == "bad_input"
    assert (out / "report.error.html").is_file() and not list(out.glob(STAGING_PREFIX + "*"))


# ---------------------------------------------------------------- configuration errors are one line
def test_a_configuration_error_is_one_line_and_exit_2(capsys, monkeypatch):
    """A ``ConfigError`` a command raises is one line (every command and variable, through the real
    path, in test_cli_config_errors.py)."""
    from torch_neuronx.cli import info
    from torch_neuronx.runtime.errors import ConfigError

    def bad_environment(*args, **kwargs):
        raise ConfigError("TORCHNEURON_64BIT='maybe' is not a boolean; use 1/0, true/false, yes/no or on/off")

    monkeypatch.setattr(info, "collect", bad_environment)
    assert main(["info"]) == 2
    printed = capsys.readouterr()
    assert _error_lines(printed.err) == ["error: TORCHNEURON_64BIT='maybe' is not a boolean; use 1/0, true/false, "
                                         "yes/no or on/off"] and "Traceback" not in printed.out + printed.err


def test_a_full_disk_keeps_the_previous_report_in_one_line(tmp_path):
    """On a full disk the pilot keeps the old report and ends in one line, without a traceback
    and without leaving its staging folder. A file-size limit stands in for the full disk (EFBIG); the
    limited run is a child process, since the limit holds for a whole process."""
    from transformers import BertConfig, BertModel

    ckpt = tmp_path / "bert"  # not a causal LM: a run that stops early and writes its report
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         vocab_size=64)).save_pretrained(ckpt)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text('{"previous": true}')
    done = children.run_with_file_limit(1024, ["-m", "torch_neuronx.cli.main", "pilot", str(ckpt), "--out", str(out),
                                               *MINIMAL], env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 2, done.stderr
    err = done.stderr
    assert _error_lines(err) == [f"error: cannot write the report in {out}: File too large; the previous report "
                                 "is kept"] and "Traceback" not in err
    assert (out / "report.json").read_text() == '{"previous": true}'
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]  # no staging folder left


# ---------------------------------------------------------------- a plain checkpoint, then reruns
STALE = {"checkpoint/stale.bin": b"old", INTERRUPTED: b"{}", "report.error.json": b"{}",
         "report.error.html": b"<html></html>"}


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    """A GPT-2 saved with ``save_pretrained`` alone (no tokenizer files), piloted into an --out that
    holds a stale run's files and one of the user's. The checkpoint step's fresh process runs in
    this one (the subject here is the report and the files)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("gpt2-run")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=64, vocab_size=320)).save_pretrained(
        root / "my-gpt2")
    out = root / "out"
    for name, data in {**STALE, "mine.txt": b"a file of the user's"}.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fresh_process, "run_in_child", lambda request, timeout: fresh_process.run(request))
        code = main(["pilot", str(root / "my-gpt2"), "--out", str(out), "--batch-size", "1", "--seq-lens", "8", "12",
                     "--gen-tokens", "2", "--iters", "2", "--train-steps", "2", "--price-per-hour", "2.0"])
    return code, root, out


def test_a_checkpoint_without_tokenizer_files_runs_on_the_byte_level_tokenizer(gpt2_run):
    code, _, out = gpt2_run
    report = _strict_json(out / "report.json")
    assert code == 0, report["summary"]["failed_checks"]
    inputs = report["steps"]["inputs"]
    assert inputs["data"]["tokenizer"] == "byte-level (built-in)"
    assert "no tokenizer files" in inputs["data"]["tokenizer_note"] and "byte-level" in inputs["summary"]
    assert report["model"]["architecture"] == "GPT2LMHeadModel"


def test_a_complete_run_replaces_every_file_of_the_previous_one(gpt2_run):
    """Publishing is all or nothing: no stale checkpoint file, interrupted or error report beside it."""
    _, _, out = gpt2_run  # --out held a stale checkpoint file, interrupted and error reports
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "inputs.json", "mine.txt", "projected-trace.json",
                                                     "report.html", "report.json", "step-memory.png",
                                                     "step-summary.png", "step-timeline-busiest.png",
                                                     "step-timeline.png", "step-trace.json"]
    assert not (out / "checkpoint" / "stale.bin").exists() and (out / "mine.txt").read_bytes() == b"a file of the user's"


@pytest.mark.parametrize("bad", [["--dtype", "bf61"], ["--seq-lens", "1"], ["--instance", "trn9.mega"],
                                 ["MODEL-TYPO"], ["--batch-size", "two"]])
def test_a_bad_rerun_leaves_the_good_run_byte_for_byte(gpt2_run, bad, capsys):
    _, root, out = gpt2_run
    good = _listing(out)
    model = [str(root / "my-gtp2")] if bad == ["MODEL-TYPO"] else [str(root / "my-gpt2"), *bad]
    assert main(["pilot", *model, "--out", str(out)]) == 2
    errors = _error_lines(capsys.readouterr().err)
    assert len(errors) == 1, errors
    if bad == ["MODEL-TYPO"]:
        assert f"did you mean {str(root / 'my-gpt2')!r}" in errors[0]
    after = _listing(out)
    assert {k: v for k, v in after.items() if not k.startswith("report.error.")} == good
    for name in ("report.error.json", "report.error.html"):
        (out / name).unlink(missing_ok=True)


def _basis_counts(basis: str) -> tuple[int, int]:
    """(programs, StableHLO ops) as the projected compile's basis sentence states them."""
    import re

    found = re.match(r"(\d+) neuronx-cc programs .*\((\d+) StableHLO ops where lowered", basis)
    assert found, basis
    return int(found.group(1)), int(found.group(2))


def test_every_figure_the_report_shows_twice_is_the_same(gpt2_run):
    """One count of compiled programs and of lowered ops; the cost step's figures are the other
    steps'; host seconds of the emulated device are never priced (only projected ones are)."""
    _, _, out = gpt2_run
    report = _strict_json(out / "report.json")
    steps = {name: step["data"] for name, step in report["steps"].items()}
    eager = steps["compilation"]["modes"]["eager"]
    projected, lowering = eager["projected_compile"], eager["lowering"]
    cold = [shape["cold"] for shape in eager["shapes"].values()]
    # Every distinct signature of the cold calls, once: what a first run compiles. This process ran
    # kernels before (a user's fresh one would compile exactly these: misses + disk hits).
    assert projected["programs"] == projected["eager_kernels"] == lowering["signatures"]
    assert sum(c["kernel_compilations"] + c["kernel_disk_hits"] for c in cold) <= projected["programs"]
    assert max(c["kernel_signatures"] for c in cold) <= projected["programs"] <= sum(c["kernel_signatures"] for c in cold)
    assert projected["stablehlo_ops"] == sum(lowering["stablehlo_ops_per_op"].values()) > 0
    assert _basis_counts(projected["basis"]) == (projected["programs"], projected["stablehlo_ops"])
    cost, performance = steps["cost"], steps["performance"]
    assert cost["compile_overhead"]["projected_first_run"]["eager"]["seconds"] == projected["seconds"]
    longest = max(performance["generation"]["eager"]["shapes"], key=int)
    request = performance["generation"]["eager"]["shapes"][longest]["projected"]["request_seconds"]["p50"]
    assert cost["projected"]["generation"]["eager"]["seconds"] == pytest.approx(request)
    assert cost["projected"]["training_run"]["total_usd"] == performance["projected_training"]["cost"]["total_usd"]
    assert cost["finetune"]["seconds"] == pytest.approx(sum(steps["finetune"]["device_step_seconds"]))
    assert performance["train_samples_per_second"] == steps["finetune"]["train_samples_per_second"]
    assert cost["price_per_hour_usd"] == report["environment"]["instance"]["price_per_hour_usd"] == 2.0
    host = [cost["generation"]["eager"], cost["finetune"]]
    assert all(job["cost_usd"] is None for job in host) and cost["compile_overhead"]["measured_cold_cost_usd"] is None
    dollars = f"${cost['projected']['generation']['eager']['cost_per_million_tokens_usd']:.4f}"
    assert report["steps"]["cost"]["summary"].startswith(f"projected: eager: {dollars} per 1M generated tokens")
