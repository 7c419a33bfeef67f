"""``torchneuron plan``: exact per-rank parameter counts (against real DTensor TP + FSDP2
sharding over a fake process group), fit verdicts and suggestions, and bad input."""
from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
import torch.distributed as dist

from torch_neuronx.cli.main import main
from torch_neuronx.plan import Layout, Planner, load_config, per_rank_parameters
from torch_neuronx.plan.sharding import meta_model
from torch_neuronx.plan.tp_plan import sharding_of
from torch_neuronx.plan.trace import trace
from torch_neuronx.testing.tiny_models import tiny_config

# Seconds of traces needing nothing from other tests: in a child pytest on the background lane.
pytestmark = [pytest.mark.fast, pytest.mark.child_process]

GiB = 2**30


def _tiny_config_file(tmp_path, **overrides):
    cfg = tiny_config("llama", **overrides)
    cfg.save_pretrained(tmp_path)
    return tmp_path


@pytest.fixture
def fake_world():
    """A fake process group of 4 ranks, seen from rank 0: no processes, no communication."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    yield
    dist.destroy_process_group()


def _real_rank0_parameters(config, tp: int, fsdp: int) -> int:
    """Rank 0's parameter elements after the real sharding: the model's TP plan through
    ``parallelize_module`` on a (fsdp, tp) mesh, then FSDP2 on every layer and the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (fsdp, tp), mesh_dim_names=("fsdp", "tp"))
    model = meta_model(config)
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel, "vocab": ColwiseParallel}
    shardings = {name: sharding_of(config, name, tuple(p.shape), "Linear", False, False)
                 for name, p in model.named_parameters() if not name.endswith("embed_tokens.weight")}
    plan = {name.rsplit(".", 1)[0]: styles[s.style]() for name, s in shardings.items() if s.style != "replicated"}
    parallelize_module(model, mesh["tp"], plan)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["fsdp"])
    fully_shard(model, mesh=mesh["fsdp"])
    return sum(p.to_local().numel() for p in model.parameters())


def test_tiny_per_rank_parameters_match_real_dtensor_fsdp2_sharding(fake_world):
    config = tiny_config("llama")
    counted = per_rank_parameters(config, tp=2, fsdp=2)
    assert counted.total == sum(p.numel() for p in meta_model(config).parameters())
    assert counted.per_rank == _real_rank0_parameters(config, tp=2, fsdp=2)


def test_llama3_8b_per_rank_parameters_exact():
    config = load_config("llama-3-8b")
    h, inter, vocab, layers, tp, fsdp = 4096, 14336, 128256, 32, 8, 4
    kv = 8 * 128
    assert per_rank_parameters(config, 1, 1).total == 8_030_261_248  # Meta's published count
    shard = lambda rows, cols: math.ceil(rows / fsdp) * cols  # noqa: E731  FSDP2 pads dim 0
    layer = (shard(h // tp, h) + 2 * shard(kv // tp, h) + shard(h, h // tp)  # q, k, v, o
             + 2 * shard(inter // tp, h) + shard(h, inter // tp)  # gate, up, down
             + 2 * shard(h, 1))  # two RMSNorms (replicated over TP)
    expected = shard(vocab, h) + layers * layer + shard(h, 1) + shard(vocab // tp, h)
    assert per_rank_parameters(config, tp, fsdp).per_rank == expected
    planner = Planner("llama-3-8b", "trn2.48xlarge", 128)
    assert planner.memory(Layout(tp, fsdp, 1, False, 2, 1)).bytes["parameters"] == 2 * expected


def test_tiny_activation_peak_grows_with_batch_and_checkpointing_saves(tmp_path):
    planner = Planner(str(_tiny_config_file(tmp_path)), "trn2.3xlarge", 64)
    one, two = (planner.memory(Layout(1, 1, b, False, 2, 1)) for b in (1, 2))
    assert two.bytes["activations_peak"] > one.bytes["activations_peak"] > 0
    assert one.other_checkpointing["activations_peak_with_checkpointing"] < one.bytes["activations_peak"]


def test_a_second_plan_of_the_same_model_reuses_the_trace_and_another_instance_traces_again(tmp_path, monkeypatch):
    """A trace is a pure function of the config, the rank's work and the projector: a second
    ``Planner`` of the same model finds it (and gives the same figures); another instance, whose
    projector differs, traces its own."""
    from torch_neuronx.plan import context

    traced = []
    monkeypatch.setattr(context, "trace", lambda *args: traced.append(args[1]) or trace(*args))
    path, layout = str(_tiny_config_file(tmp_path, num_attention_heads=2)), Layout(1, 1, 3, False, 2, 1)
    first = Planner(path, "trn2.3xlarge", 48).plan(layout).to_dict()
    once = list(traced)
    assert once
    assert Planner(path, "trn2.3xlarge", 48).plan(layout).to_dict() == first and traced == once
    Planner(path, "trn1.2xlarge", 48).plan(Layout(1, 1, 3, False, 1, 1))
    assert traced == once + once


@pytest.mark.slow
def test_llama3_70b_does_not_fit_one_trn2_3xlarge_but_fits_two_trn2_48xlarge():
    small = Planner("llama-3-70b", "trn2.3xlarge", 2048).plan(Layout(4, 1, 1, False, 2, 1)).to_dict()
    assert not small["memory"]["fits"]
    assert small["memory"]["total_bytes"] > small["memory"]["hbm_bytes"] == 24 * GiB
    assert small["suggestion"] is not None and "instances" in small["suggestion"]["change"]
    big = Planner("llama-3-70b", "trn2.48xlarge", 2048).plan(Layout(8, 16, 1, True, 2, 2)).to_dict()
    assert big["memory"]["fits"]
    assert big["parameters"]["total"] == 70_553_706_496
    t = big["time"]
    assert t["mode"] == "compile" and t["step_seconds"] == t["by_mode"]["compile"]["step_seconds"] > 0
    assert t["by_mode"]["eager"]["step_seconds"] > t["step_seconds"]  # one launch per op, no fusion
    assert 0 < t["mfu"] < 1 and t["usd_per_billion_tokens"] > 0
    assert t["micro_collective_seconds"] > 0 and t["step_collective_seconds"] > 0  # TP, then FSDP


def test_cli_writes_plan_json_and_sweeps(tmp_path, capsys):
    model = _tiny_config_file(tmp_path / "m")
    out = tmp_path / "plan.json"
    assert main(["plan", str(model), "--instance", "trn2.3xlarge", "--tp", "2", "--fsdp", "2",
                 "--seq-len", "32", "--sweep", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["memory"]["fits"] and data["time"]["label"] == "projected"
    assert data["time"]["compile"]["distinct_kernels"] > 0 and data["time"]["compile"]["graphs"] == 3
    ranked = [r["usd_per_billion_tokens"] for r in data["sweep"]]
    assert ranked == sorted(ranked) and ranked
    assert "fits" in capsys.readouterr().out
    page = out.with_suffix(".html").read_text()
    assert "data:image/png;base64," in page and "projected" in page and "Sweep" in page


@pytest.mark.parametrize("args, message", [
    (["--tp", "4", "--fsdp", "2"], "larger than the 4 logical cores"),
    (["--lnc", "3"], "LNC=3 is not supported"),
])
def test_cli_bad_layout_is_one_line_and_exit_2(args, message, capsys):
    assert main(["plan", "llama-3-8b", "--instance", "trn2.3xlarge", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_unknown_model_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-model", "hidden_size": 8}))
    assert main(["plan", str(tmp_path)]) == 2
    assert main(["plan", "no-such-bundled-model"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "unknown or unsupported model type 'no-such-model'" in err[0]
    assert "bundled config" in err[1]


def test_a_sequence_longer_than_the_learned_position_table_is_one_line(capsys, tmp_path):
    """BERT-Large's embeddings hold 512 positions (``max_position_embeddings``): the plan's default
    2,048-token sequence has no position rows, so the plan stops before any trace with one line
    naming the table and the length that fits, and writes nothing. A rotary model (Llama) has no
    table and is not held to its config's context."""
    from torch_neuronx.plan.checks import learned_positions

    out = tmp_path / "plan"
    assert main(["plan", "bert-large-uncased", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    line = err.strip()
    assert line == ("error: 'bert-large-uncased' has a learned position table of 512 positions, fewer than "
                    "--seq-len 2048: give --seq-len 512 or less"), line
    assert not out.exists()
    assert learned_positions(tiny_config("opt", max_position_embeddings=64)) == 64  # OPT's offset of 2 not counted
    assert learned_positions(tiny_config("llama")) is None


def test_tiny_inference_plan_counts_kv_cache_growth_and_decode_tokens(tmp_path):
    planner = Planner(str(_tiny_config_file(tmp_path)), "trn2.3xlarge", 32, mode="infer", dtype="fp32",
                      decode_tokens=16, max_len=100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = planner.plan(Layout(2, 1, 3, False, 2, 1)).to_dict()
    # The trace calls the model with the cache argument's current name (Transformers 5.x warns
    # once per call site on the old ``past_key_values``; a user's plan should not show it).
    assert not [w for w in caught if "deprecated" in str(w.message)], [str(w.message) for w in caught]
    layers, kv_heads_per_rank, head_dim = 2, 1, 16  # TinySize: 2 layers, 2 KV heads of 16, over TP=2
    # the static cache: --max-len positions for every sequence of the batch, allocated up front
    assert plan["memory"]["bytes"]["kv_cache"] == 2 * layers * 3 * 100 * kv_heads_per_rank * head_dim * 4
    assert "gradients" not in plan["memory"]["bytes"] and "optimizer_state" not in plan["memory"]["bytes"]
    inf = plan["inference"]
    request = inf["ttft_seconds"] + 15 * inf["tpot_seconds"]  # the first token comes with the prefill
    assert inf["tokens_per_second"] == pytest.approx(3 * 16 / request)
    assert inf["tpot_seconds"] > 0 and inf["ttft_seconds"] > 0
