"""`torchneuron coverage` on a few architectures: tiny builds, device vs CPU, crash isolation, figures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import children

from torch_neuronx.cli.main import main
from torch_neuronx.coverage.probe import CHECKS, classify
from torch_neuronx.coverage.sweep import ProbeWorker, summarise
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm, tiny_config

pytestmark = pytest.mark.fast

TINY_LAYERS = TinySize().layers
# The compiled probes below build one decoder layer, not two: a compiled check passes or fails per
# graph, and each further layer is more kernels to build cold (the sweep's own `--layers 1`).
ONE_LAYER = TinySize(layers=1)


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
    # Without the lowering check (7 of a llama probe's 12 CPU-s): test_sweep_of_two_architectures asserts it.
    worker = ProbeWorker("neuron", tmp_path / "worker.log", lower=False)
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
    (["--layers", "0"], "--layers must be at least 1"),
])
def test_unusable_options_are_rejected_before_any_worker_starts(tmp_path, capsys, args, message):
    assert main(["coverage", "--only", "llama", "--out", str(tmp_path / "cov"), *args]) == 2
    printed = capsys.readouterr()
    errors = [line for line in printed.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], printed
    assert not (tmp_path / "cov").exists()  # nothing ran, nothing was written


# --- the compiled columns -------------------------------------------------------------------------------------


def _erfinv_in_final_norm(builder):
    """Wraps the tiny-model builder so the final norm of the model feeds through ``erfinv``:
    an op torch-mlir 20261001 cannot lower (the real product fails on it too)."""
    import torch

    class ErfinvThenNorm(torch.nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.norm = norm

        def forward(self, hidden):
            return self.norm(torch.special.erfinv(torch.tanh(hidden) * 0.5))

    def build(model_type, **kwargs):
        model = builder(model_type, **kwargs)
        model.model.norm = ErfinvThenNorm(model.model.norm)
        return model

    return build


@pytest.mark.slow  # a tiny Llama compiled for each check (seconds each)
def test_a_compiled_failure_torch_mlir_names_is_shared_with_the_real_product(monkeypatch):
    from torch_neuronx.coverage import compiled

    monkeypatch.setattr(compiled, "tiny_causal_lm", _erfinv_in_final_norm(compiled.tiny_causal_lm))
    result = compiled.probe_attention("llama", "sdpa", "neuron", ONE_LAYER)
    assert result["supported"] and all(c["ok"] for c in result["cpu"].values())  # the CPU runs erfinv
    for name, check in result["checks"].items():
        assert check["ok"] is False and check["cause"] == "shared", (name, check)
        assert check["op"] == "torch.aten.erfinv" and "no lowering for torch.aten.erfinv" in check["error"]


@pytest.mark.slow  # a tiny Llama compiled for each check (seconds each)
def test_an_emulator_only_compiled_failure_is_ours(monkeypatch):
    from torch_neuronx.compile import passes
    from torch_neuronx.coverage import compiled

    def broken(gm):  # the emulator's own step: the real product does not move graphs to the CPU
        raise RuntimeError("injected emulator fault")

    monkeypatch.setattr(passes, "rewrite_devices_to_cpu", broken)
    result = compiled.probe_attention("llama", "sdpa", "neuron", ONE_LAYER)
    for name, check in result["checks"].items():
        assert check["ok"] is False and check["cause"] == "ours" and check["op"] is None, (name, check)
        assert "injected emulator fault" in check["error"]
    assert compiled.compiled_status({"sdpa": result, "eager": {"supported": False}}) == "ours_fail"


def test_an_unsupported_attention_implementation_is_not_a_failure():
    from torch_neuronx.coverage import compiled

    result = compiled.probe_attention("gemma2", "sdpa", "neuron")  # Gemma 2's softcap has no SDPA path
    assert result["supported"] is False and "does not support" in result["error"]
    assert compiled.compiled_status({"sdpa": result, "eager": result}) == "not_run"


def test_failure_classification_walks_the_exception_chain():
    from torch_neuronx.compile.lowering.errors import LoweringError
    from torch_neuronx.coverage.compiled import classify_failure

    def raised(inner):
        try:
            try:
                raise inner
            except Exception as exc:
                raise RuntimeError("backend='neuron' raised") from exc
        except RuntimeError as outer:
            return outer

    named = LoweringError("torch-mlir could not lower the graph to StableHLO: no lowering for torch.prims.fma",
                          ["failed to legalize operation 'torch.prims.fma'"])
    shared = classify_failure(raised(named))
    assert (shared["cause"], shared["op"]) == ("shared", "torch.prims.fma")
    unnamed = classify_failure(raised(LoweringError("torch-mlir could not lower the graph: std::bad_alloc")))
    assert unnamed["cause"] == "ours" and "bad_alloc" in unnamed["error"]  # no op named: says nothing of Trainium


def _compiled_result(name, status, eager_backward):
    """One architecture's result with compiled columns; ``eager_backward`` is the eager-attention
    backward check (the others pass)."""
    ok = {"ok": True, "error": None, "cause": None, "op": None,
          "compile": {"graphs": 1, "aot_graphs": 1, "lowered": 1, "stablehlo_ops": 100, "fallbacks": []}}
    cpu = {c: {"ok": True} for c in CHECKS}
    checks = {"compiled_forward": ok, "compiled_backward": ok, "compiled_generate_static": ok}
    compiled = {"lowering": True, "sdpa": {"supported": True, "checks": checks},
                "eager": {"supported": True, "checks": {**checks, "compiled_backward": eager_backward}}}
    from torch_neuronx.coverage.compiled import compiled_status

    compiled["status"] = compiled_status(compiled)
    return {"model_type": name, "status": status, "cpu": cpu, "device_checks": cpu, "compiled": compiled,
            "seconds": 60.0}


def test_compiled_figures_separate_shared_failures_from_ours():
    fma = {"ok": False, "error": "LoweringError: no lowering for torch.prims.fma", "cause": "shared",
           "op": "torch.prims.fma"}
    wrong = {"ok": False, "error": "gradient of lm_head.weight differs from CPU by 0.1", "cause": "ours", "op": None}
    cpu_fails = {"ok": None, "error": "not compared: fails on CPU", "cause": None, "op": None}
    results = [_compiled_result("llama", "pass", fma), _compiled_result("gpt2", "pass", wrong),
               _compiled_result("qwen2", "pass", cpu_fails), _compiled_result("rwkv", "cpu_fail", fma)]
    assert [r["compiled"]["status"] for r in results] == ["shared_fail", "ours_fail", "pass", "shared_fail"]
    f = summarise(results, installed=["llama", "gpt2", "qwen2", "rwkv"])["overall"]["compiled"]
    assert (f["checked"], f["pass"], f["shared_fail"], f["ours_fail"]) == (4, 1, 2, 1)
    assert (f["eager_passing"], f["eager_passing_compiled_pass"]) == (3, 1)
    assert f["shared_ops"] == {"torch.prims.fma": ["llama", "rwkv"]}
    assert f["ours"] == {"gpt2": ["eager compiled_backward: gradient of lm_head.weight differs from CPU by 0.1"]}
    assert f["passing_with_unlowered_graphs"] == []
    checks = dict(results[2]["compiled"]["sdpa"]["checks"])  # qwen2: a passing graph torch-mlir did not check
    checks["compiled_forward"] = {**checks["compiled_forward"],
                                  "compile": {**checks["compiled_forward"]["compile"], "lowered": 0}}
    results[2]["compiled"]["sdpa"]["checks"] = checks
    again = summarise(results, installed=["llama", "gpt2", "qwen2", "rwkv"])["overall"]["compiled"]
    assert again["passing_with_unlowered_graphs"] == ["qwen2"]


def test_a_stopped_sweep_resumes_with_what_is_left(tmp_path, capsys):
    from torch_neuronx.coverage.sweep import ResultLog

    options = {"device": "neuron", "lowering": True, "compiled": True}  # the default --layers: not named
    log = ResultLog(tmp_path / "results.jsonl", options, resume=False)
    wrong = {"ok": False, "error": "greedy tokens differ from CPU", "cause": "ours", "op": None}
    log.add(_compiled_result("llama", "pass", wrong))
    ResultLog(tmp_path / "results.jsonl", {**options, "compiled": False}, resume=True).add(
        _compiled_result("gpt2", "pass", wrong))  # other options: not reused by a --compiled run
    ResultLog(tmp_path / "results.jsonl", {**options, "layers": 1}, resume=True).add(
        _compiled_result("qwen2", "pass", wrong))  # nor by a run of models of another depth
    with (tmp_path / "results.jsonl").open("a") as f:
        f.write('{"options": {"device": "neuron", "lowe')  # the line a killed sweep was writing
    assert set(ResultLog(tmp_path / "results.jsonl", options, resume=True).done) == {"llama"}

    # Everything asked for is done: the report and the Markdown table come from the log, no worker starts.
    assert main(["coverage", "--only", "llama", "--compiled", "--resume", "--out", str(tmp_path)]) == 1
    assert "resuming: 1 of 1 architectures already done" in capsys.readouterr().out
    report = json.loads((tmp_path / "coverage.json").read_text())
    assert report["compiled_checked"] and report["summary"]["overall"]["compiled"]["ours_failures"] == ["llama"]
    table = (tmp_path / "coverage-compiled.md").read_text()
    assert report["created_utc"] in table
    assert "| llama | pass | ✓ | ✓ | ✓ | ✓ | **✗** | ✓ | ours_fail | eager compiled_backward: greedy tokens" in table


def _compiled_llama(out: Path, environ: dict[str, str]) -> tuple[int, str, Path]:
    """``torchneuron coverage --only llama --compiled --layers 1`` as a user runs it: its exit
    code, its stderr and its output folder."""
    done = children.finished(children.start(["-m", "torch_neuronx.cli.main", "coverage", "--only", "llama",
                                             "--compiled", "--layers", "1", "--out", str(out)], env=environ,
                                            cwd=out), timeout=900)
    return done.returncode, done.stderr, out


# Six cold compiles (of one decoder layer: 75 CPU-s of the CLI's, 91 with the default two) in a
# worker process that needs nothing from the tests before it. In a suite run, the eager training
# step's two graphs are in the session's compile cache already: test_compile_hf's child (the lane's
# first job) trains this Llama on this batch.
compiled_llama = children.lane_fixture("compiled_llama", _compiled_llama, folder_prefix="torchneuron-coverage-")


@pytest.mark.slow
@pytest.mark.compiled_models
def test_compiled_columns_of_a_tiny_llama_match_the_cpu(compiled_llama):
    code, stderr, out = compiled_llama
    report = json.loads((out / "coverage.json").read_text())
    (result,) = report["results"]
    assert code == 0 and result["compiled"]["status"] == "pass", (result["compiled"], stderr[-2000:])
    assert report["layers"] == 1 and "`--layers 1`" in (out / "coverage-compiled.md").read_text()
    assert result["parameters"] < tiny_causal_lm("llama").num_parameters()  # the worker built one layer
    for attention in ("sdpa", "eager"):
        for name, check in result["compiled"][attention]["checks"].items():
            assert check["ok"] is True, (attention, name, check)
            # something was compiled and every graph lowered to StableHLO (nothing fell back)
            record = check["compile"]
            assert record["graphs"] >= 1 and record["lowered"] == record["aot_graphs"] >= 1, (attention, name, record)
            assert record["stablehlo_ops"] > 0 and not record["fallbacks"]


def test_a_crash_while_compiling_keeps_the_eager_results(tmp_path):
    from torch_neuronx.testing.child_process import ChildFailed

    eager = _result("llama", {}, {})

    class CrashesWhileCompiling:  # the child: eager checks done, then killed by a signal in the compiled stage
        def request(self, payload, timeout, on_event):
            on_event({"phase": "compiled", "partial": eager})
            on_event({"phase": "compiled eager"})
            raise ChildFailed("exited", "exit code -11")

        def stop(self):
            pass

    worker = ProbeWorker("neuron", tmp_path / "worker.log", compiled=True)
    worker.child = CrashesWhileCompiling()
    result = worker.probe("llama", timeout=60)
    assert result["status"] == "pass" and result["device_checks"] == eager["device_checks"]
    assert result["compiled"]["status"] == "ours_fail"
    assert result["compiled"]["error"] == "worker crashed (exit code -11) during the compiled eager stage"


def test_a_model_transformers_never_compiles_is_not_applicable_not_ours():
    """DBRX declares ``_can_compile_fullgraph = False``: Transformers never compiles its static-cache
    ``generate`` on any device, so "nothing was compiled" is not a failure of the emulator."""
    from torch_neuronx.coverage.compiled import compiled_status, not_auto_compiled
    from torch_neuronx.coverage.markdown import check_mark
    from torch_neuronx.testing.tiny_models import tiny_causal_lm

    assert not_auto_compiled(tiny_causal_lm("llama")) is None
    reason = not_auto_compiled(tiny_causal_lm("dbrx"))
    assert reason is not None and "DbrxForCausalLM" in reason
    # Llama 4 declares it can be captured whole, but Transformers' get_compiled_call hands back
    # the model's own __call__ for every llama4 model type: its generate is never compiled either.
    llama4 = tiny_causal_lm("llama4_text")
    assert llama4._can_compile_fullgraph
    reason = not_auto_compiled(llama4)
    assert reason is not None and "Llama4ForCausalLM" in reason and "get_compiled_call" in reason
    skipped = {"ok": None, "error": reason, "cause": None, "op": None}
    assert check_mark(skipped) == "n/a"
    assert check_mark({"ok": None, "error": "not compared: fails on CPU (x)", "cause": None, "op": None}) == "cpu"
    passed = {"ok": True, "error": None, "cause": None, "op": None}
    results = {a: {"supported": True, "checks": {"compiled_forward": passed, "compiled_generate_static": skipped}}
               for a in ("sdpa", "eager")}
    assert compiled_status(results) == "pass"


@pytest.mark.slow
def test_each_compiled_check_starts_from_a_fresh_dynamo():
    """Dynamo's recompile limit counts per code object: a check must not find it used up by the
    checks before it (Qwen4-exp's generate compiled nothing after its forward and backward checks,
    on CPU with backend="eager" too, because one Transformers wrapper serves all its methods)."""
    from torch_neuronx.coverage.compiled import _run_compiled

    def scaled(x, factor):
        return x * factor

    x = torch.arange(6.0)
    compiled = torch.compile(scaled, backend="neuron")
    cpu = {"forward": {"ok": True, "error": None}}
    with torch._dynamo.config.patch(recompile_limit=1):
        first = _run_compiled("compiled_forward", lambda: compiled(x.to("neuron"), 2.0).cpu(), {"forward": x * 2}, cpu)
        # A new constant fails the first entry's guard: without a reset the limit of 1 is used up.
        second = _run_compiled("compiled_forward", lambda: compiled(x.to("neuron"), 3.0).cpu(), {"forward": x * 3}, cpu)
    assert first["ok"] and first["compile"]["graphs"] == 1
    assert second["ok"], second["error"]
    assert second["compile"]["graphs"] == 1
