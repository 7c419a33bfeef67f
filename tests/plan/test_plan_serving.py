"""Serving plans and the layouts people serve, with hand counts: heads padded to a multiple of TP,
a model without a Transformers TP plan sharded Megatron-style, the static cache at --max-len,
int8 weights halving what a decode step reads, an encoder's latency, replicas that each hold the
whole model, and every refusal as one line before any work."""
from __future__ import annotations

import json

import pytest

from torch_neuronx.cli.main import main
from torch_neuronx.plan import Layout, Planner
from torch_neuronx.plan.sharding import meta_model, per_rank_parameters
from torch_neuronx.plan.work import serving_work
from torch_neuronx.projection.serving import EncoderWork
from torch_neuronx.testing.tiny_models import tiny_config

# Seconds of traces needing nothing from other tests: in a child pytest on the background lane.
pytestmark = pytest.mark.child_process


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    tiny_config("llama").save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    cfg = tiny_config("bert")
    cfg.architectures = ["BertModel"]
    cfg.is_decoder = False
    cfg.save_pretrained(path)
    return str(path)


def test_forty_heads_at_tp32_are_padded_to_64_parameters_and_memory_by_hand():
    """Llama-2-13B on a trn1.32xlarge at TP 32, as AWS serves it: 40 query (and KV) heads padded
    to 64, two per rank (NxD ``pad_model``); the MLP's 13,824 rows split evenly."""
    h, hd, inter, vocab, layers = 5120, 128, 13824, 32000, 40
    per_head = 2 * hd  # two padded heads of 128 per rank
    layer = 3 * per_head * h + h * per_head + 2 * (inter // 32) * h + h * (inter // 32) + 2 * h
    expected = layers * layer + vocab * h + h + (vocab // 32) * h  # the embedding whole, the LM head split
    padding = layers * 4 * (per_head - 40 * hd // 32) * h  # q, k, v, o: 256 rows or columns where 160 would do
    planner = Planner("llama-2-13b", "trn1.32xlarge", 16, mode="infer", dtype="bf16", decode_tokens=16)
    counts = planner.ctx.parameters(32, 1)
    assert counts.tp_local == expected == 644_510_720 and counts.padding_tp_local == padding
    heads = planner.ctx.heads(32)
    assert (heads.padded_heads, heads.heads_per_rank, heads.kv_heads_per_rank) == (64, 2, 2)
    memory = planner.memory(Layout(32, 1, 1, False, 1, 1))
    assert memory.bytes["parameters"] == 2 * expected
    kv = 2 * layers * 1 * 32 * 2 * hd * 2  # 32 positions (16 in, 16 out), two KV heads per rank, bf16
    assert memory.bytes["kv_cache"] == kv
    assert memory.padding_bytes == 2 * padding + kv * 24 / 64  # 24 of the 64 KV heads are zeros


def test_gpt2_without_a_transformers_tp_plan_is_sharded_megatron_style_by_hand():
    """GPT-2 defines no TP plan: the fused QKV (a Conv1D, weight stored (in, out)) and the MLP's
    c_fc are column-parallel, both c_proj row-parallel; the tied embedding is split on the
    vocabulary with the LM head. Tiny GPT-2: hidden 64, 4 heads of 16, MLP 128, vocab 512."""
    cfg = tiny_config("gpt2")
    counts = per_rank_parameters(cfg, 4, 1)
    h, hd, inter, tp = 64, 16, 128, 4
    layer = (h * 3 * hd + 3 * hd) + (hd * h + h) + (h * inter // tp + inter // tp) + (inter // tp * h + h) + 4 * h
    assert counts.tp_local == 2 * layer + 512 // tp * h + 256 * h + 2 * h == 42_016
    assert "Megatron-style plan derived from the module structure" in counts.tp_plan
    assert counts.total == sum(p.numel() for p in meta_model(cfg).parameters())


def test_gpt2_trains_and_serves_at_tp4_with_its_rank_share_traced(tmp_path):
    tiny_config("gpt2").save_pretrained(tmp_path)
    train = Planner(str(tmp_path), "trn2.3xlarge", 32).plan(Layout(4, 1, 1, False, 1, 1))
    assert train.fits and "one TP rank's work is" in train.method and train.time.chosen.step_seconds > 0
    serve = Planner(str(tmp_path), "trn2.3xlarge", 32, mode="infer", decode_tokens=8).plan(Layout(4, 1, 1, False, 1, 1))
    assert serve.fits and serve.time.chosen.tpot_seconds > 0 and serve.time.chosen.ttft_seconds > 0


def test_int8_weights_halve_what_a_decode_step_reads(tiny_llama):
    layout = Layout(1, 1, 1, False, 2, 1)
    plans = {d: Planner(tiny_llama, "trn2.3xlarge", 16, mode="infer", decode_tokens=4, weight_dtype=d)
             for d in ("bf16", "int8")}
    (bf16, _), (int8, _) = (serving_work(p.ctx, layout) for p in plans.values())
    counts = plans["bf16"].ctx.parameters(1, 1)
    kv = plans["bf16"].ctx.kv_cache_bytes(layout, 20)
    weights_bf16, weights_int8 = bf16.decode.io_bytes - kv, int8.decode.io_bytes - kv
    # the projections' weights: 2 bytes each in bf16, 1 in int8; norms and the rest stay bf16
    assert weights_bf16 - weights_int8 == counts.matmul_tp_local
    projections = counts.matmul_tp_local
    assert weights_int8 - projections == weights_bf16 - 2 * projections  # what is not quantized is the same
    assert int8.decode.streamed_seconds > bf16.decode.streamed_seconds == 0  # dequantized on VectorE as read
    memory = {d: p.memory(layout).bytes["parameters"] for d, p in plans.items()}
    assert memory["bf16"] - memory["int8"] == projections


def test_an_encoder_serves_one_forward_of_the_batch(tiny_bert):
    planner = Planner(tiny_bert, "trn1.2xlarge", 128, mode="infer")
    plan = planner.plan(Layout(1, 2, 4, False, 1, 1))  # one model on each of the two cores
    work, _ = serving_work(planner.ctx, plan.layout)
    assert isinstance(work, EncoderWork) and plan.kind == "encoder" and plan.output_len == 0
    f = planner.ctx.factors
    latency = work.forward.seconds(f) + work.comm.seconds(f)
    data = plan.to_dict()["inference"]
    assert data["latency_seconds"] == pytest.approx(latency)
    assert data["sequences_per_second_per_core"] == pytest.approx(4 / latency)
    assert data["sequences_per_second"] == pytest.approx(2 * 4 / latency)  # two replicas
    assert "encoder latency" in data["error_band"] and plan.max_len is None and "kv_cache" not in plan.memory.bytes


def test_replicas_each_hold_the_whole_model_and_multiply_throughput(tiny_llama):
    planner = Planner(tiny_llama, "trn2.3xlarge", 16, mode="infer", decode_tokens=8)
    one, four = (planner.plan(Layout(1, dp, 1, False, 1, 1)) for dp in (1, 4))
    assert four.memory.bytes["parameters"] == one.memory.bytes["parameters"] == planner.ctx.weight_bytes(1)
    assert four.time.chosen.tpot_seconds == one.time.chosen.tpot_seconds
    per_replica = one.time.throughput()["tokens_per_second"]
    assert four.time.throughput()["tokens_per_second"] == pytest.approx(4 * per_replica)
    assert four.time.cost.usd_per_million_tokens == pytest.approx(one.time.cost.usd_per_million_tokens / 4)


def test_serving_sweep_ranks_by_serving_figures_in_80_columns(tiny_llama, tmp_path):
    from rich.console import Console

    from torch_neuronx.plan.sweep_table import show_sweep

    planner = Planner(tiny_llama, "trn2.3xlarge", 16, mode="infer", decode_tokens=8)
    rows = planner.sweep(Layout(1, 1, 2, False, 2, 1))
    money = [r.figures["usd_per_million_output_tokens"] for r in rows]
    assert len(rows) == 6 and money == sorted(money) and all(r.layout.dp * r.layout.tp == 4 for r in rows)
    console = Console(width=80, record=True, file=open(tmp_path / "out.txt", "w"))
    show_sweep("decoder", rows, console)
    text = console.export_text()
    assert "TTFT ms" in text and "TPOT ms" in text and "$/1M tok" in text and "MFU" not in text
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80


def _plan(args, tmp_path) -> tuple[int, dict]:
    out = tmp_path / "plan.json"
    code = main(["plan", *args, "--out", str(out)])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_a_plan_that_does_not_fit_exits_1_leads_with_the_change_and_marks_its_figures(tmp_path, capsys):
    code, data = _plan(["llama-3-8b", "--instance", "trn2.3xlarge", "--tp", "4", "--seq-len", "256",
                        "--micro-batch", "8"], tmp_path)
    assert code == 1 and not data["fits"] and data["suggestion"]["change"]
    assert data["time"]["label"] == "projected, if it fit (it does not)"
    out = capsys.readouterr().out
    assert out.startswith("does not fit: smallest change that fits: ") and "as if it fit" in out


def test_the_default_instance_is_the_configured_one_and_idle_cores_are_priced(tiny_llama, tmp_path, capsys,
                                                                           monkeypatch):
    monkeypatch.setenv("TORCHNEURON_INSTANCE", "trn1.32xlarge")
    code, data = _plan([tiny_llama, "--infer", "--input-len", "16", "--output-len", "4"], tmp_path)
    assert code == 0 and data["instance"] == "trn1.32xlarge"
    assert data["cores"]["used"] == 1 and data["cores"]["idle"] == 31
    assert data["cores"]["idle_usd_per_hour"] == pytest.approx(data["cores"]["usd_per_hour"] * 31 / 32)
    assert "uses 1 of the 32 logical cores; 31 idle" in capsys.readouterr().out.replace("\n", " ")
    monkeypatch.delenv("TORCHNEURON_INSTANCE")
    assert _plan([tiny_llama, "--infer", "--input-len", "16", "--output-len", "4"],
                 tmp_path)[1]["instance"] == "trn2.3xlarge"


@pytest.fixture
def wide_heads(tmp_path):
    """48 heads of 512 over a hidden size of 1,536, and a context of 4 M positions."""
    cfg = tiny_config("llama", hidden_size=1536, num_attention_heads=48, num_key_value_heads=48, head_dim=512,
                      max_position_embeddings=4_000_000)
    cfg.save_pretrained(tmp_path / "wide")
    return str(tmp_path / "wide")


@pytest.mark.parametrize("encoder, args, message", [
    (False, ["--infer", "--input-len", "64", "--output-len", "64", "--max-len", "100"],
     "--max-len 100 is below input + output = 128 tokens"),
    (True, ["--infer", "--output-len", "8"], "is an encoder, which produces no tokens"),
    (False, ["--weight-dtype", "int8"], "--weight-dtype, --max-len and --context-bucket are serving knobs"),
])
def test_bad_serving_input_is_one_line_and_exit_2(encoder, args, message, tiny_llama, tiny_bert, tmp_path, capsys):
    model = tiny_bert if encoder else tiny_llama
    assert main(["plan", model, "--instance", "trn2.3xlarge", *args, "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "p.json").exists()


def test_weights_the_instance_cannot_hold_are_one_line_before_any_trace(tmp_path, capsys, monkeypatch):
    from torch_neuronx.plan import context

    def traced(*_):
        raise AssertionError("traced before the weights were checked")
    monkeypatch.setattr(context.PlanContext, "traced", traced)
    assert main(["plan", "llama-3-70b", "--instance", "trn1.2xlarge", "--infer", "--out",
                 str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "--weight-dtype bf16: the model's weights take 131.4 GiB, more than the 32.0 GiB" in err
    assert "--weight-dtype int8 or fp8" in err and err.count("\n") == 1


def test_padding_that_makes_a_layout_not_fit_names_the_nearest_tp_that_fits(wide_heads, tmp_path, capsys):
    """At TP 32 the 48 heads are padded to 64, two per rank: the 3.5 M-position static cache takes
    2 heads × 512 × 2 (keys, values) × 2 layers × 3.5 M × 2 B = 28.7 GB per core, against 21.5 GB
    for 1.5 real heads. TP 24 holds two heads per rank too; TP 48 holds one and fits."""
    args = [wide_heads, "--instance", "trn2.48xlarge", "--tp", "32", "--infer", "--input-len", "16",
            "--output-len", "16", "--max-len", "3500000"]
    assert main(["plan", *args, "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "48 query heads padded to 64" in err and "does not fit" in err
    assert err.rstrip().endswith("the nearest TP that fits is --tp 48") and err.count("\n") == 1
