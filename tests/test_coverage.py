"""`torchneuron coverage` on a few architectures: tiny builds, device vs CPU, crash isolation, figures."""
from __future__ import annotations

import json

import pytest

from torch_neuronx.cli.main import main
from torch_neuronx.coverage.probe import CHECKS, classify
from torch_neuronx.coverage.sweep import ProbeWorker, summarise
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm, tiny_config

TINY_LAYERS = TinySize().layers


def test_tiny_config_shrinks_generically():
    llama = tiny_config("llama")
    assert (llama.hidden_size, llama.num_hidden_layers, llama.num_attention_heads, llama.vocab_size) == \
        (64, TINY_LAYERS, 4, 512)
    gemma3 = tiny_config("gemma3_text")  # per-layer list attributes follow the new depth
    assert len(gemma3.layer_types) == TINY_LAYERS
    gpt2 = tiny_config("gpt2")  # special-token ids stay inside the shrunk vocabulary
    assert gpt2.n_embd == 64 and gpt2.eos_token_id < gpt2.vocab_size


# Formerly unbuildable: heterogeneous per-layer configs (gemma4_text, dots3_note_text), a default config
# missing values (dbrx, lfm2_moe, cohere_compass_text), a decoder sub-config (musicgen), tied hybrid layers (zamba).
@pytest.mark.parametrize("model_type", ["gemma4_text", "dots3_note_text", "dbrx", "lfm2_moe", "cohere_compass_text",
                                        "musicgen", "zamba"])
def test_formerly_failing_architectures_build_tiny_and_run(model_type):
    import torch

    model = tiny_causal_lm(model_type)
    assert sum(p.numel() for p in model.parameters()) < 3_000_000
    ids = torch.randint(3, 200, (2, 8), generator=torch.Generator().manual_seed(0))
    logits = model(input_ids=ids).logits
    assert logits.shape[:2] == (2, 8) and torch.isfinite(logits).all()


def test_heterogeneous_per_layer_overrides_follow_the_kept_layers():
    config = tiny_config("gemma4_text")  # 30 layers, every 6th full attention with its own head_dim
    assert config.num_hidden_layers == TINY_LAYERS and sorted(set(config.layer_types)) == \
        ["full_attention", "sliding_attention"]
    overrides = config._heterogeneity_spec.per_layer_overrides
    assert set(overrides) <= set(range(config.num_hidden_layers))
    assert all(o.get("head_dim", 16) == TinySize().head_dim for o in overrides.values())


def _result(name, cpu_ok, dev_ok):
    cpu = {c: {"ok": cpu_ok.get(c, True)} for c in CHECKS}
    dev = {c: {"ok": dev_ok.get(c, True)} for c in CHECKS}
    return {"model_type": name, "cpu": cpu, "device_checks": dev, "status": classify(cpu, dev)}


def test_failures_on_cpu_are_not_held_against_the_device():
    results = [
        _result("llama", {}, {}),
        _result("gpt2", {}, {"backward": False}),
        _result("rwkv", {"forward": False}, {"forward": False}),
        {"model_type": "reformer", "status": "build_failed"},
    ]
    assert [r["status"] for r in results[:3]] == ["pass", "device_fail", "cpu_fail"]
    s = summarise(results, installed=["llama", "gpt2", "rwkv", "reformer"])
    overall = s["overall"]
    assert (overall["pass"], overall["device_fail"], overall["cpu_fail"], overall["build_failed"]) == (1, 1, 1, 1)
    assert overall["coverage_percent"] == 50.0  # llama of {llama, gpt2}: the CPU-clean ones
    assert overall["parity_percent"] == pytest.approx(66.7)  # llama and rwkv match CPU, of 3 built
    assert s["device_failures"] == ["gpt2"] and s["cpu_failures"] == ["reformer", "rwkv"]
    assert s["popular"]["architectures"] == 2  # llama and gpt2 are on the curated list


@pytest.mark.slow
def test_sweep_of_two_architectures(tmp_path, capsys):
    code = main(["coverage", "--only", "llama,gpt2", "--jobs", "2", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "coverage.json").read_text())
    assert code == 0, report["summary"]
    assert [r["model_type"] for r in report["results"]] == ["llama", "gpt2"]
    for r in report["results"]:
        assert r["status"] == "pass", r
        assert set(r["device_checks"]) == set(CHECKS) and all(c["ok"] for c in r["device_checks"].values())
    assert report["summary"]["overall"]["coverage_percent"] == 100.0
    for r in report["results"]:  # the "lowers" column: every kernel of the device checks lowered once
        lowers = r["lowers"]
        assert lowers["signatures"] > 10 and lowers["stablehlo_ops"] > 0
        assert lowers["ok"] == (not lowers["ops_not_lowered"])
    not_lowered = report["summary"]["ops_not_lowered"]
    assert all(set(archs) <= {"llama", "gpt2"} for archs in not_lowered.values())
    out = capsys.readouterr().out
    assert "coverage 100.0%" in out and "lowers" in out and "with the lowering check" in out


@pytest.mark.slow
def test_a_hung_worker_is_replaced_and_the_sweep_goes_on(tmp_path):
    worker = ProbeWorker("neuron", tmp_path / "worker.log")
    try:
        hung = worker.probe("llama", timeout=0.001)
        assert hung["crashed"] and "timed out" in hung["error"]
        assert worker.child.proc is None  # killed
        again = worker.probe("llama", timeout=300)  # a fresh worker takes over
        assert again["status"] == "pass"
    finally:
        worker.stop()


def test_unknown_architecture_is_a_clear_error(tmp_path, capsys):
    assert main(["coverage", "--only", "llama,not_a_model", "--out", str(tmp_path)]) == 2
    assert "not_a_model" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--device", "cuda"], "'cuda' is not available"),
    (["--device", "neuron:99"], "does not exist"),
    (["--device", "nonsense"], "not a PyTorch device name"),
    (["--limit", "-2"], "--limit must be at least 1"),
    (["--limit", "0"], "--limit must be at least 1"),
    (["--timeout", "nan"], "--timeout"),
])
def test_unusable_options_are_rejected_before_any_worker_starts(tmp_path, capsys, args, message):
    assert main(["coverage", "--only", "llama", "--out", str(tmp_path / "cov"), *args]) == 2
    printed = capsys.readouterr()
    errors = [line for line in printed.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], printed
    assert not (tmp_path / "cov").exists()  # nothing ran, nothing was written
