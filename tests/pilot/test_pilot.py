"""`torchneuron pilot` end to end at minimal sizes: report schema, device vs CPU, exit codes, bad input."""
from __future__ import annotations

import copy
import io
import json

import pytest
import torch
from rich.console import Console

from torch_neuronx.cli.main import main
from torch_neuronx.pilot import PilotConfig, run_pilot
from torch_neuronx.pilot import model as pilot_model
from torch_neuronx.pilot.console import PilotConsole
from torch_neuronx.pilot.report import SCHEMA_VERSION, STEP_ORDER, ReportSchemaError, validate_report

MINIMAL = ["--batch-size", "1", "--seq-lens", "8,12", "--gen-tokens", "3", "--iters", "2", "--train-steps", "2"]


def _pilot(tmp_path, *args) -> tuple[int, dict]:
    """Exit code and report of a pilot run: report.json when it reached its end, else its error report."""
    code = main(["pilot", "--out", str(tmp_path), *MINIMAL, *args])
    return code, json.loads((tmp_path / ("report.json" if code in (0, 1) else "report.error.json")).read_text())


def _quiet() -> PilotConsole:
    return PilotConsole(Console(file=io.StringIO(), width=120))


@pytest.fixture(scope="module")
def neuron_report(tmp_path_factory, own_neff_cache):
    """The pilot in an empty NEFF cache of its own, as on a new machine: its cold kernel
    compilations are counted whatever other processes of the session put in the shared cache."""
    out = tmp_path_factory.mktemp("pilot-neuron")
    with own_neff_cache(tmp_path_factory.mktemp("pilot-neff")):
        code = main(["pilot", "--out", str(out), *MINIMAL, "--price-per-hour", "1.5"])
    return code, json.loads((out / "report.json").read_text()), out


@pytest.fixture
def restore_core_capacity():
    """Tests that emulate a smaller core must give the process its cores back."""
    capacity = torch.neuron.get_device_properties(0).total_memory
    yield
    torch_neuronx_c = __import__("torch_neuronx")._C
    torch_neuronx_c._configure_devices(torch.neuron.device_count(), capacity)


@pytest.mark.slow
def test_pilot_on_neuron_passes_and_matches_cpu(neuron_report):
    code, report, out = neuron_report
    assert code == 0, report["summary"]["failed_checks"]
    validate_report(report)
    assert report["status"] == "passed" and report["environment"]["emulated"]
    assert "emulated-host time" in report["environment"]["time_basis"]
    steps = report["steps"]
    assert list(steps) == list(STEP_ORDER)
    assert all(s["status"] == "passed" for s in steps.values()), {n: s["summary"] for n, s in steps.items()}
    # numerics: real comparisons against the CPU, one per shape, plus per-layer errors from hooks
    logits = steps["numerics"]["data"]["eager"]["logits"]
    assert set(logits) == {"8", "12"}
    assert all(e["max_abs_error"] <= 1e-4 for e in logits.values())
    assert len(steps["numerics"]["data"]["eager"]["per_layer_max_abs_error"]) == \
        pilot_model.BUILTIN_SIZE.layers
    drift_rows = steps["numerics"]["data"]["precision"]["drift"]  # the drift per precision vs FP32
    assert [d["precision"] for d in drift_rows] == ["fp32", "bf16", "bf16-sr", "fp8"]
    assert drift_rows[0]["max_rel_error"] == 0.0 < drift_rows[1]["max_rel_error"]
    gen = steps["quality"]["data"]["generation"]["eager"]
    assert gen["device_tokens"] == gen["cpu_tokens"] and len(gen["cpu_tokens"][0]) == 3
    ft = steps["finetune"]["data"]
    assert len(ft["device_loss"]) == 2 and ft["device_loss"][1] < ft["device_loss"][0]
    assert steps["checkpoint"]["data"]["max_abs_difference"] == 0.0
    assert (out / "checkpoint" / "config.json").is_file()
    comp = steps["compilation"]["data"]
    assert comp["modes"]["eager"]["shapes"]["8"]["cold"]["kernel_compilations"] > 0
    assert comp["modes"]["eager"]["shapes"]["8"]["warm"]["kernel_compilations"] == 0
    assert set(comp["fresh_process"]["eager"]["first_call_seconds"]) == {"8", "12"}
    perf = steps["performance"]["data"]
    shape = perf["generation"]["eager"]["shapes"]["12"]
    assert shape["ttft_seconds"]["count"] == 1 and shape["per_token_seconds"]["count"] == 2
    assert 0 < perf["inference_memory"]["peak_bytes"] <= perf["inference_memory"]["capacity_bytes"]
    cost = steps["cost"]["data"]
    job = cost["generation"]["eager"]  # host seconds of the emulated device: never priced
    assert job["seconds"] > 0 and job["cost_usd"] is None
    priced = cost["projected"]["generation"]["eager"]
    assert priced["cost_usd"] == pytest.approx(priced["seconds"] * 1.5 / 3600)
    # every projected figure carries its band; eager work has none and says why
    projected = shape["projected"]
    assert projected["error_band"]["relative"] is None and "eager" in projected["error_band"]["basis"]
    assert cost["projected"]["generation"]["eager"]["error_band"] == projected["error_band"]
    assert perf["projected_training"]["cost"]["error_band"]["relative"] is None
    assert "(no band)" in steps["performance"]["summary"]
    # the profiled steady step: its device time is the accounting's projection of it (a check)
    profiled = steps["profile"]["data"]
    assert profiled["timeline"]["device_seconds"] > 0 and profiled["memory"]["peak_allocated_bytes"] > 0
    assert (out / profiled["trace"]).is_file()
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 7 and "http" not in html.split("<body>")[0]


@pytest.mark.slow
def test_pilot_on_cpu_reusing_the_saved_inputs(neuron_report, tmp_path):
    _, _, out = neuron_report
    saved = json.loads((out / "inputs.json").read_text())
    code, report = _pilot(tmp_path, "--device", "cpu", "--inputs", str(out / "inputs.json"), "--train-steps", "0",
                          "--no-hidden-states")
    assert code == 0, report["summary"]["failed_checks"]
    assert json.loads((tmp_path / "inputs.json").read_text())["batches"] == saved["batches"]
    assert report["steps"]["inputs"]["data"]["origin"].startswith("loaded from")
    assert report["environment"]["emulated"] is False
    assert report["steps"]["finetune"]["status"] == "skipped"
    assert report["steps"]["cost"]["status"] == "not_available"  # no price for a CPU machine
    assert report["steps"]["performance"]["data"]["inference_memory"]["capacity_bytes"] is None


@pytest.mark.slow
def test_a_device_fault_fails_the_checks_and_the_exit_code(tmp_path, monkeypatch):
    """A device copy whose weights differ (as a miscompiled kernel would) must be caught."""
    real = pilot_model.to_device

    def faulty(model, device):
        dev = real(model, device)
        with torch.no_grad():
            dev.lm_head.weight.add_(0.05)
        return dev

    monkeypatch.setattr("torch_neuronx.pilot.procedure.to_device", faulty)
    cfg = PilotConfig(batch_size=1, seq_lens=(8,), gen_tokens=3, iters=2, train_steps=0, out=tmp_path)
    assert run_pilot(cfg, _quiet()) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "failed" and report["exit_code"] == 1
    assert report["steps"]["numerics"]["status"] == "failed"
    assert any("logits" in name for name in report["summary"]["failed_checks"])


@pytest.mark.parametrize("args, kind", [
    (["/nonexistent/model"], "bad_input"),
    (["--dtype", "float64"], "unsupported_dtype"),
    (["--seq-lens", "1"], "bad_input"),
    (["--instance", "trn9.mega"], "bad_input"),
    (["--device", "cuda"], "device_unavailable"),
])
def test_bad_input_is_one_line_and_leaves_a_report(tmp_path, capsys, args, kind):
    code = main(["pilot", "--out", str(tmp_path), *args])
    printed = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in printed.out + printed.err
    # one error line, on stderr, not repeated on stdout; no table of steps that never ran
    errors = [line for line in printed.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and len(errors[0]) > 10 and "error:" not in printed.out
    assert "not_run" not in printed.out
    report = json.loads((tmp_path / "report.error.json").read_text())
    validate_report(report)
    assert report["status"] == "error" and report["error"]["kind"] == kind
    assert (tmp_path / "report.error.html").is_file() and not (tmp_path / "report.json").exists()


def test_not_a_causal_lm(tmp_path, capsys):
    from transformers import BertConfig, BertModel

    ckpt = tmp_path / "encoder"
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         vocab_size=64)).save_pretrained(ckpt)
    (ckpt / "config.json").write_text(json.dumps({**json.loads((ckpt / "config.json").read_text()),
                                                  "model_type": "clip_vision_model"}))
    code = main(["pilot", str(ckpt), "--out", str(tmp_path / "out")])
    assert code == 2
    report = json.loads((tmp_path / "out" / "report.error.json").read_text())
    assert report["error"]["kind"] == "not_causal_lm"
    assert "not a causal language model" in capsys.readouterr().err


def test_out_of_memory_on_a_small_core(tmp_path, restore_core_capacity):
    cfg = PilotConfig(batch_size=1, seq_lens=(8,), gen_tokens=2, iters=2, train_steps=0, out=tmp_path,
                      hbm_per_core_gib=0.0001)
    assert run_pilot(cfg, _quiet()) == 2
    report = json.loads((tmp_path / "report.error.json").read_text())
    assert report["error"]["kind"] == "out_of_memory" and "out of memory" in report["error"]["message"]
    assert report["steps"]["inputs"]["status"] == "passed"  # what ran before the OOM is kept


def test_inputs_outside_the_vocabulary_are_rejected(tmp_path):
    from torch_neuronx.pilot.inputs import build_inputs, builtin_tokenizer

    inputs = build_inputs(builtin_tokenizer(), batch_size=1, seq_lens=[8], eval_len=8)
    inputs.batches[8][0][0] = 10**6
    bad = tmp_path / "bad.json"
    inputs.save(bad)
    code, report = _pilot(tmp_path / "out", "--inputs", str(bad))
    assert code == 2 and "outside the model's vocabulary" in report["error"]["message"]


@pytest.mark.slow
def test_schema_validation_rejects_broken_reports(neuron_report):
    _, report, _ = neuron_report
    assert report["schema_version"] == SCHEMA_VERSION
    for mutate in (
        lambda r: r.pop("steps"),
        lambda r: r.update(schema_version="2.0"),
        lambda r: r.update(status="maybe"),
        lambda r: r["steps"]["numerics"].update(status="fine"),
        lambda r: r["steps"]["numerics"]["checks"][0].pop("passed"),
        lambda r: r.update(exit_code=True),
        lambda r: r["environment"].pop("time_basis"),
    ):
        broken = copy.deepcopy(report)
        mutate(broken)
        with pytest.raises(ReportSchemaError):
            validate_report(broken)


@pytest.mark.parametrize("optimizer, schedule, flagged", [("sgd", "linear", True), ("sgd", "constant", False),
                                                          ("adamw", "cosine", False)])
def test_finetune_flags_a_learning_rate_the_real_product_compiles_by_value(optimizer, schedule, flagged):
    """SGD with a rate that changes every step recompiles its update on Trainium
    (alpha of _foreach_add_ is static: TR python_ops/torch_mlir/ops/foreach_ops.py:120);
    the fine-tune step fails a check naming the op, the argument and the remedy."""
    from torch_neuronx.pilot.config import TOLERANCES
    from torch_neuronx.pilot.steps import finetune
    from torch_neuronx.testing.tiny_models import tiny_causal_lm

    model = tiny_causal_lm("llama")
    rows = [[5, 9, 13, 17, 21, 25, 29, 33]]
    result, checks, _ = finetune.run(model, copy.deepcopy(model).to("neuron"), rows, 3, torch.device("neuron"),
                                     TOLERANCES["float32"], lambda: None, lambda: None, optimizer, schedule)
    [check] = [c for c in checks if "steps after the first" in c.name]
    assert check.passed is not flagged
    assert result.steady_step_new_kernels == (2 if flagged else 0)
    assert result.optimizer == {"sgd": "SGD", "adamw": "AdamW"}[optimizer] + f" lr=0.001, {schedule} schedule"
    if flagged:
        [row] = result.steady_step_recompiles
        assert (row["op"], row["static_arguments"], row["iterations"]) == ("aten::_foreach_add_.List", ["alpha"], 2)
        assert "learning rate" in check.detail
    assert result.max_relative_difference <= TOLERANCES["float32"].loss_rtol * 3


@pytest.mark.parametrize("field", ["optimizer", "lr_schedule"])
def test_an_unknown_optimizer_or_schedule_is_bad_input(field):
    from torch_neuronx.pilot.config import PilotError

    with pytest.raises(PilotError, match=f"--{field.replace('_', '-')} 'adam' must be one of") as info:
        PilotConfig(**{field: "adam"}).validate()
    assert info.value.kind == "bad_input"


def test_progress_off_a_terminal_prints_one_tick_per_stage_and_nothing_else():
    """In a CI log or a pipe the live bar is off: no blank lines left where it stood."""
    out = io.StringIO()
    console = PilotConsole(Console(file=out, width=80))
    for title, total in (("load", 3), ("compile", None)):
        with console.progress(title, total) as advance:
            advance()
    assert out.getvalue() == "✓ load\n✓ compile\n"
