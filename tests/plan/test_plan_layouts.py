"""The layouts people run, with hand-computed answers: the 1F1B pipeline, ZeRO-1 against FSDP
memory, gradient accumulation with one reduction per global batch, KV heads replicated when TP
exceeds them, encoders at TP=1, and inference's TTFT / time-per-output-token split."""
from __future__ import annotations

import json
import math

import pytest

from torch_neuronx.cli.main import main
from torch_neuronx.neuron.memory import block_bytes, layout_bytes
from torch_neuronx.plan import Layout, Planner
from torch_neuronx.plan.collectives import dp_collectives, pipeline_sends
from torch_neuronx.plan.memory import activations
from torch_neuronx.plan.sharding import meta_model
from torch_neuronx.plan.work import serving_work
from torch_neuronx.projection import CollectiveRecord
from torch_neuronx.projection.job import (CommWork, Factors, GraphWork, TrainingWork, accumulation_steps,
                                          pipeline_bubble, training_time)
from torch_neuronx.projection.serving import InferenceWork, inference_time
from torch_neuronx.runtime.errors import UsageError
from torch_neuronx.testing.tiny_models import tiny_config

# Seconds of traces needing nothing from other tests: in a child pytest on the background lane.
pytestmark = pytest.mark.child_process

# round numbers so every expected figure below can be worked out by hand
F = Factors(tensor_efficiency=0.5, hbm_efficiency=0.5, link_efficiency=0.5, launch_seconds=0.1,
            collective_step_seconds=0.01, efa_efficiency=0.25, engine_efficiency=0.5, engine_overlap=1.0,
            op_seconds=0.0)


def _graph(name, tensor=0.0, io=0.0, intermediate=0.0):
    return GraphWork(name, flops=1e12, tensor_seconds_at_peak=tensor, engine_seconds_at_peak=0.0, io_bytes=io,
                     intermediate_bytes=intermediate, hbm_bytes_per_s=1e9, kernels=10)


def _tiny_dir(tmp_path, **overrides):
    tiny_config("llama", **overrides).save_pretrained(tmp_path)
    return str(tmp_path)


def test_1f1b_bubble_and_step_by_hand():
    assert pipeline_bubble(4, 12) == pytest.approx(3 / 15)
    assert pipeline_bubble(1, 7) == 0
    work = TrainingWork(
        forward=_graph("forward", tensor=1.0),  # 1 / 0.5 + 0.1 launch = 2.1 s
        backward=_graph("backward", tensor=2.0, io=1e9, intermediate=1e9),  # max(4, (1+1)/0.5 = 4) + 0.1 = 4.1 s
        optimizer=_graph("optimizer", io=1e9),  # 1e9 B / (1e9 × 0.5) + 0.1 = 2.1 s
        micro_comm=CommWork(0.5, 10, 0), step_comm=CommWork(1.0, 0, 0),  # 0.5/0.5 + 10 × 0.01 = 1.1 s; 2 s
        micro_batches=4, pp=3, tokens_per_step=4096, model_flops_per_step=1e15, peak_flops_per_rank=1e12, ranks=6)
    t = training_time(work, F)
    micro = 2.1 + 4.1 + 1.1
    assert t.pipeline_slots == 4 + 3 - 1 and t.bubble_fraction == pytest.approx(2 / 6)
    assert t.micro_step_seconds == pytest.approx(micro)
    assert t.step_seconds == pytest.approx(6 * micro + 2.0 + 2.1)
    assert t.tokens_per_second == pytest.approx(4096 / t.step_seconds)
    assert t.mfu == pytest.approx(1e15 / (t.step_seconds * 6 * 1e12))
    assert t.launches_per_step == 2 * 4 + 1  # one forward and one backward graph per micro-batch, one optimizer
    eager = training_time(work, F, "eager", {"forward": 5.0, "backward": 9.0, "optimizer": 1.0})
    assert eager.step_seconds == pytest.approx(6 * (5 + 9 + 1.1) + 2.0 + 1.0)


def test_ttft_and_time_per_output_token_by_hand():
    work = InferenceWork(prefill=_graph("prefill", tensor=0.5),  # 0.5 / 0.5 + 0.1 = 1.1 s
                         decode=_graph("decode", io=2e7),  # 2e7 / 5e8 + 0.1 = 0.14 s
                         prefill_comm=CommWork(0.1, 0, 0), decode_comm=CommWork(0.0, 2, 0),  # 0.2 s; 0.02 s
                         batch=4, output_len=101)
    t = inference_time(work, F)
    assert t.ttft_seconds == pytest.approx(1.3)
    assert t.tpot_seconds == pytest.approx(0.16)
    assert t.request_seconds == pytest.approx(1.3 + 100 * 0.16)
    assert t.tokens_per_second == pytest.approx(4 * 101 / (1.3 + 16))


def test_accumulation_steps_and_bad_global_batch():
    assert accumulation_steps(1024, 1, 64) == 16
    assert accumulation_steps(1024, 16, 32) == 2
    with pytest.raises(UsageError, match="not divisible by --micro-batch 2 × --dp 3 = 6"):
        accumulation_steps(1024, 2, 3)


def test_zero1_shards_only_the_optimizer_state_fsdp_shards_everything(tmp_path):
    model = _tiny_dir(tmp_path)
    n = sum(p.numel() for p in meta_model(tiny_config("llama")).parameters())
    planner = Planner(model, "trn2.3xlarge", 32, dtype="autocast-bf16")  # fp32 master weights: 4 bytes
    zero1 = planner.memory(Layout(1, 4, 1, False, 2, 1, shard="zero1")).bytes
    none = planner.memory(Layout(1, 4, 1, False, 2, 1, shard="none")).bytes
    fsdp = planner.memory(Layout(1, 4, 1, False, 2, 1, shard="fsdp")).bytes
    assert zero1["parameters"] == zero1["gradients"] == none["parameters"] == 4 * n
    assert zero1["optimizer_state"] == 2 * 4 * -(-n // 4) and none["optimizer_state"] == 2 * 4 * n
    padded = planner.ctx.parameters(1, 4).per_rank  # FSDP2's padded shard (checked against real FSDP2)
    assert n / 4 <= padded < n / 4 + 4096
    assert fsdp["parameters"] == fsdp["gradients"] == 4 * padded and fsdp["optimizer_state"] == 2 * 4 * padded
    assert zero1["collective_buffers"] == 0 < fsdp["collective_buffers"]
    bf16 = Planner(model, "trn2.3xlarge", 32, dtype="bf16").memory(Layout(1, 4, 1, False, 2, 1, shard="zero1"))
    assert bf16.bytes["parameters"] == 2 * n
    # The device's allocator on each rank's long-lived tensors: parameters, gradients, then the two
    # AdamW moments of each (a quarter of dim 0 under ZeRO-1), each a block of its size class
    shapes = [tuple(p.shape) for p in meta_model(tiny_config("llama")).parameters()]
    whole = [4 * math.prod(s) for s in shapes]
    quarter = [4 * -(-s[0] // 4) * math.prod(s[1:]) for s in shapes]
    for plan, moments in ((none, whole), (zero1, quarter)):
        tensors = whole * 2 + [m for m in moments for _moment in range(2)]
        allocated, reserved = layout_bytes(tensors)
        assert plan["allocator_rounding"] == allocated - sum(tensors) == sum(block_bytes(t) - t for t in tensors)
        assert plan["allocator_segments"] == reserved - allocated >= 0 and reserved % (2 * 2**20) == 0  # small pool
    assert zero1["allocator_rounding"] >= 4 * 2 * (256 - 64)  # a norm's 64-byte quarter moments: 256-byte blocks


def test_one_gradient_reduction_per_global_batch(tmp_path):
    planner = Planner(_tiny_dir(tmp_path), "trn2.3xlarge", 32, dtype="bf16")
    layout = Layout(1, 2, 1, False, 2, 1, shard="zero1", global_batch=8)
    assert layout.micro_batches == 4
    micro, step, _ = dp_collectives(planner.ctx, layout)
    stage_bytes = planner.ctx.stage_parameters(layout) * 2
    assert not micro  # ZeRO-1 reduces nothing per micro-batch
    assert dict(step) == {CollectiveRecord("reduce_scatter", stage_bytes, 2, "chip"): 1,
                          CollectiveRecord("all_gather", stage_bytes, 2, "chip"): 1}
    t = planner.time(layout).to_dict()
    assert t["micro_batches"] == 4 and t["collectives"]["per_global_batch"]["bytes"] == 2 * stage_bytes
    assert t["step_seconds"] == pytest.approx(4 * t["micro_step_seconds"] + t["step_collective_seconds"]
                                              + t["optimizer_seconds"])
    fsdp_micro, fsdp_step, _ = dp_collectives(planner.ctx, Layout(1, 2, 1, False, 2, 1, shard="fsdp", global_batch=8))
    assert dict(fsdp_micro) == {CollectiveRecord("all_gather", stage_bytes, 2, "chip"): 2}  # forward, backward
    assert dict(fsdp_step) == {CollectiveRecord("reduce_scatter", stage_bytes, 2, "chip"): 1}


def test_pipeline_stage_holds_its_layers_and_in_flight_micro_batches(tmp_path):
    planner = Planner(_tiny_dir(tmp_path, num_hidden_layers=4), "trn2.3xlarge", 32, dtype="fp32")
    p = planner.ctx.parameters(1, 1)
    layer, rest = p.layer_unsharded, p.tp_local - 4 * p.layer_unsharded
    staged = Layout(1, 1, 1, False, 2, 1, pp=2, shard="none", global_batch=6)
    assert planner.ctx.stage_parameters(staged) == 2 * layer + rest
    t = planner.ctx.traced(1, 1, False, 2)
    in_flight = 2  # a 1F1B first stage of 2 holds min(P, m) = 2 micro-batches
    assert activations(planner.ctx, staged, False) == pytest.approx(t.activations(2) + (in_flight - 1) * 2
                                                                    * t.per_layer_activations())
    sends, _ = pipeline_sends(planner.ctx, staged)
    hidden = tiny_config("llama").hidden_size
    assert dict(sends) == {CollectiveRecord("send", 32 * hidden * 4, 2, "chip"): 2}  # activations, then gradients
    timed = planner.time(staged).to_dict()
    assert timed["pipeline_slots"] == 6 + 2 - 1 and timed["bubble_fraction"] == pytest.approx(1 / 7)


def test_kv_heads_replicated_when_tp_exceeds_them_memory_and_traffic():
    planner = Planner("llama-3.1-8b", "trn1.32xlarge", 128, dtype="bf16")
    h, inter, hd, layers = 4096, 14336, 128, 32
    # TP=32 over 8 KV heads: every rank holds one whole KV head (k and v), replicated over 4 ranks
    layer = h // 32 * h + 2 * hd * h + h * (h // 32) + 3 * (inter // 32) * h + 2 * h
    assert planner.ctx.parameters(32, 1).layer_unsharded == layer
    assert planner.ctx.parameters(8, 1).layer_unsharded - planner.ctx.parameters(32, 1).layer_unsharded == (
        2 * h // 8 * h + 3 * inter // 8 * h) - (2 * h // 32 * h + 3 * inter // 32 * h)  # q, o, MLP: k, v equal
    layout = Layout(32, 1, 2, False, 1, 1)
    assert planner.ctx.kv_cache_bytes(layout, 1000) == 2 * layers * 2 * 1000 * 1 * hd * 2
    _, step, _ = dp_collectives(planner.ctx, layout)  # the replicas' k/v gradients are all-reduced once per step
    # the 4 consecutive ranks sharing a head span two trn1 chips (2 cores each): NeuronLink
    assert dict(step) == {CollectiveRecord("all_reduce", 2 * hd * h * 2 * layers, 4, "neuronlink"): 1}


def test_encoder_trains_at_tp1_and_at_tp2_with_the_derived_plan(tmp_path):
    cfg = tiny_config("bert")
    cfg.architectures = ["BertForPreTraining"]
    cfg.is_decoder = False
    cfg.save_pretrained(tmp_path)
    planner = Planner(str(tmp_path), "trn1.32xlarge", 32, dtype="autocast-bf16")
    plan = planner.plan(Layout(1, 4, 2, False, 1, 1, shard="zero1", global_batch=16)).to_dict()
    assert plan["model_type"] == "bert" and plan["time"]["micro_batches"] == 2
    assert plan["time"]["step_seconds"] > 0 and plan["memory"]["bytes"]["activations_peak"] > 0
    tp2 = planner.plan(Layout(2, 1, 1, False, 1, 1)).to_dict()  # BERT has no Transformers TP plan
    assert "Megatron-style plan derived" in tp2["parameters"]["tp_plan"]
    assert tp2["parameters"]["tp_local"] < plan["parameters"]["tp_local"]


def test_tiny_inference_ttft_is_the_prefill_and_tpot_grows_with_the_static_cache(tmp_path):
    model = _tiny_dir(tmp_path)
    short, long = (Planner(model, "trn2.3xlarge", 64, mode="infer", dtype="bf16", decode_tokens=16, max_len=m)
                   for m in (80, 256))
    layout = Layout(2, 1, 3, False, 2, 1)
    a, b = short.plan(layout).to_dict()["inference"], long.plan(layout).to_dict()["inference"]
    assert a["ttft_seconds"] == pytest.approx(b["ttft_seconds"])  # the prefill does not see the cache length
    wa, _ = serving_work(short.ctx, layout)
    wb, _ = serving_work(long.ctx, layout)
    cfg = tiny_config("llama")
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_per_rank = -(-cfg.num_key_value_heads // 2)
    # every decode step reads the whole static cache: 256 against 80 positions
    assert wb.decode.io_bytes - wa.decode.io_bytes == 2 * cfg.num_hidden_layers * 3 * 176 * kv_per_rank * head_dim * 2
    assert b["tpot_seconds"] > a["tpot_seconds"]


def test_compiled_mode_beats_eager_and_plan_json_carries_both(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", _tiny_dir(tmp_path / "m"), "--instance", "trn2.3xlarge", "--tp", "2", "--dp", "2",
                 "--shard", "zero1", "--micro-batch", "1", "--global-batch", "4", "--seq-len", "32",
                 "--precision", "autocast-bf16", "--train", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    t = data["time"]
    assert t["mode"] == "compile" and t["micro_batches"] == 2
    assert t["by_mode"]["eager"]["step_seconds"] > t["by_mode"]["compile"]["step_seconds"] == t["step_seconds"]
    assert t["tokens_per_second"] == pytest.approx(4 * 32 / t["step_seconds"]) and 0 < t["mfu"] < 1
    assert "leave-one-out" in t["error_band"]
    infer = tmp_path / "infer.json"
    assert main(["plan", str(tmp_path / "m"), "--instance", "trn2.3xlarge", "--tp", "2", "--infer",
                 "--batch-size", "2", "--input-len", "48", "--output-len", "8", "--mode", "eager",
                 "--out", str(infer)]) == 0
    inf = json.loads(infer.read_text())["inference"]
    # eager, two tiny layers: launch-bound, so a decode step (its cache concatenations) costs about
    # what the 48-token prefill does; the prefill is not necessarily the longer one
    assert inf["mode"] == "eager" and inf["ttft_seconds"] > 0 and inf["tpot_seconds"] > 0
    assert inf["input_len"] == 48 and inf["tokens_per_second"] > 0


@pytest.mark.parametrize("args, message", [
    (["--pp", "3"], "--pp 3 does not divide the model's 32 layers"),
    (["--dp", "4", "--micro-batch", "1", "--global-batch", "10"], "--global-batch 10 is not divisible"),
    (["--fsdp", "2", "--shard", "zero1"], "--fsdp F means --dp F --shard fsdp"),
    (["--tp", "4", "--pp", "2"], "world size tp×pp×dp = 8 is larger than the 4 logical cores"),
])
def test_bad_layouts_exit_2_with_one_line(args, message, capsys):
    assert main(["plan", "llama-3-8b", "--instance", "trn2.3xlarge", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
