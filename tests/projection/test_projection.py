"""Projected Trainium time and cost (docs/projection.md): analytic answers from the data file."""
import dataclasses
import json
import math
import re

import pytest
import torch

from torch_neuronx import projection as P
from torch_neuronx.projection.hardware import load_data
from torch_neuronx.projection.kernel import resolve_op
from torch_neuronx.runtime.profiles import get_profile

pytestmark = pytest.mark.fast

DATA = load_data()
DEFAULTS = DATA["defaults"]


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def core_figure(target, *path):
    node = DATA["targets"][target]["per_physical_core"]
    for p in path:
        node = node[p]
    return node["value"]


def chip_figure(target, name):
    return DATA["targets"][target]["per_chip"][name]["value"]


def calibration_file(tmp_path, **fields):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"schema": 1, **fields}))
    return P.load_calibration(path)


@pytest.fixture
def trn2():
    return P.Projector("trn2.3xlarge", lnc=2, calibration=P.defaults())


# --- one kernel ---------------------------------------------------------------------------
def test_bf16_matmul_projects_flops_over_peak_times_efficiency(trn2):
    m, n, k = 4096, 2048, 8192
    cost = trn2.add_signature("aten::mm", "mm-a", (meta(m, k), meta(k, n)))
    peak = core_figure("trn2", "tensor_flops", "bf16") * 2  # LNC=2: two physical cores
    assert cost.engine == "tensor" and cost.bound == "compute"
    assert cost.flops == 2 * m * n * k
    assert cost.seconds == pytest.approx(2 * m * n * k / (peak * DEFAULTS["efficiency"]["tensor"]), rel=1e-12)
    assert cost.bytes == (m * k + k * n + m * n) * 2


def test_large_elementwise_op_is_memory_bound_at_bytes_over_bandwidth(trn2):
    n = 1 << 24
    cost = trn2.add_signature("aten::add.Tensor", "add", (meta(n, dtype=torch.float32),
                                                          meta(n, dtype=torch.float32), 1))
    hbm = chip_figure("trn2", "hbm_bytes_per_s") * 2 / 8  # a logical core's share of the chip
    assert cost.engine == "vector" and cost.bound == "memory"
    assert cost.bytes == 3 * 4 * n
    assert cost.seconds == pytest.approx(3 * 4 * n / (hbm * DEFAULTS["efficiency"]["hbm"]), rel=1e-12)


def test_fp32_matmul_is_four_times_slower_than_bf16(trn2):
    a = trn2.add_signature("aten::mm", "bf16", (meta(2048, 2048), meta(2048, 2048)))
    b = trn2.add_signature("aten::mm", "fp32", (meta(2048, 2048, dtype=torch.float32),
                                                meta(2048, 2048, dtype=torch.float32)))
    assert a.bound == b.bound == "compute"
    assert b.seconds / a.seconds == pytest.approx(4.0, rel=1e-12)


def test_fp8_and_bias_dtype_rules(trn2):
    x = trn2.add_signature("aten::mm", "fp8", (meta(2048, 2048, dtype=torch.float8_e4m3fn),
                                               meta(2048, 2048, dtype=torch.float8_e4m3fn)))
    a = trn2.add_signature("aten::mm", "bf16", (meta(2048, 2048), meta(2048, 2048)))
    assert a.seconds / x.seconds == pytest.approx(2.0)  # double-row FP8 on trn2
    # an fp32 bias does not set the TensorE rate of a bf16 addmm
    bias = trn2.add_signature("aten::addmm", "addmm", (meta(2048, dtype=torch.float32),
                                                       meta(2048, 2048), meta(2048, 2048), 1, 1))
    assert bias.compute_seconds == pytest.approx(a.compute_seconds * (1 + 1 / 2048), rel=1e-3)


def test_trn3_versus_trn2_changes_only_what_the_data_says():
    def project(instance, key, op, args):
        return P.Projector(instance, calibration=P.defaults()).add_signature(op, key, args)

    mm = ("aten::mm", (meta(4096, 4096), meta(4096, 4096)))
    f8 = torch.float8_e4m3fn
    fp8 = ("aten::mm", (meta(4096, 4096, dtype=f8), meta(4096, 4096, dtype=f8)))
    add = ("aten::add.Tensor", (meta(1 << 24), meta(1 << 24), 1))
    for (op, args), ratio in [
        (mm, core_figure("trn2", "tensor_flops", "bf16") / core_figure("trn3", "tensor_flops", "bf16")),
        (fp8, core_figure("trn2", "tensor_flops", "fp8") / core_figure("trn3", "tensor_flops", "fp8")),
        (add, chip_figure("trn2", "hbm_bytes_per_s") / chip_figure("trn3", "hbm_bytes_per_s")),
    ]:
        t2, t3 = project("trn2.3xlarge", "k", op, args), project("trn3", "k", op, args)
        assert (t2.flops, t2.bytes, t2.engine, t2.bound) == (t3.flops, t3.bytes, t3.engine, t3.bound)
        assert t3.seconds / t2.seconds == pytest.approx(ratio, rel=1e-12)


def test_logical_core_config_scales_peaks_and_bandwidth():
    one = P.device_model("trn2.3xlarge", lnc=1)
    two = P.device_model("trn2.3xlarge", lnc=2)
    assert two.tensor_flops["bf16"] == 2 * one.tensor_flops["bf16"]
    assert two.hbm_bytes_per_s == 2 * one.hbm_bytes_per_s
    assert one.logical_cores == 8 and two.logical_cores == 4
    assert P.device_model("trn1.2xlarge").legacy and not two.legacy
    with pytest.raises(ValueError, match="LNC=2 is not supported on trn1.2xlarge"):
        P.device_model("trn1.2xlarge", lnc=2)


def test_every_figure_has_a_source_and_a_date():
    def figures(node):
        if isinstance(node, dict) and "value" in node:
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from figures(v)

    found = list(figures(DATA["targets"])) + list(figures(DATA["instances"]))
    assert len(found) > 30
    for f in found:
        assert f["source"] and f["date"], f
    for name, entry in DATA["instances"].items():
        get_profile(name)  # every priced instance is a runtime profile
        for p in entry["prices"]:
            assert p["source"] and p["date"] and p["usd_per_hour"] > 0


def test_engine_mapping():
    cases = {"aten::mm": "tensor", "aten::convolution": "tensor", "aten::exp": "scalar",
             "aten::_softmax": "vector", "aten::add_.Tensor": "vector", "aten::sum.dim_IntList": "vector",
             "aten::cat": "dma", "aten::index_select": "dma", "aten::sort": "gpsimd",
             "aten::view": "none", "aten::transpose.int": "none",
             "aten::_scaled_dot_product_flash_attention_for_cpu": "tensor"}
    for op, engine in cases.items():
        assert P.engine_of(resolve_op(op)) == engine, op


def test_cpu_flash_attention_counts_as_pytorch_flash_formula(trn2):
    b, h, s, d = 2, 4, 256, 64
    q = meta(b, h, s, d)
    cost = trn2.add_signature("aten::_scaled_dot_product_flash_attention_for_cpu", "sdpa",
                              (q, q, q, 0.0, True, None, None))
    assert cost.flops == 4 * b * h * s * s * d  # QK^T and AV, PyTorch's sdpa_flop_count
    # on ScalarE beside the matmuls: each score's exp, and the results (output, logsumexp) leaving PSUM
    assert cost.elements == b * h * s * s + b * h * s * d + b * h * s


def test_a_matmul_result_leaves_psum_through_scalar_e(trn2):
    """Each element of a TensorE result is copied out of PSUM by a compute engine, ScalarE in a
    compiled graph: an (M, K) @ (K, N) matmul puts M × N elements on ScalarE beside its FLOPs."""
    from torch_neuronx.projection import job

    mm = trn2.add_signature("aten::mm", "mm", (meta(256, 512), meta(512, 64)))
    assert (mm.engine, mm.flops, mm.elements) == ("tensor", 2 * 256 * 512 * 64, 256 * 64)
    g = job.graph_work("linear", trn2.kernels, {"mm": 3}, 0.0, trn2.device, trn2.calibration)
    assert g.engine_seconds_at_peak == pytest.approx(3 * 256 * 64 / trn2.device.engine_elements_per_s["scalar"])


def test_a_softmax_is_three_vector_passes_and_a_graph_charges_attentions_exp_to_scalar_e(trn2):
    """A softmax reads its input three times on VectorE (row max, row sum, division); a compiled
    graph holding a fused attention kernel charges its scores' exponentials to ScalarE."""
    from torch_neuronx.projection import job

    x = meta(8, 128, 128)
    softmax = trn2.add_signature("aten::_softmax", "softmax", (x, -1, False))
    assert (softmax.engine, softmax.elements) == ("vector", 3 * 8 * 128 * 128)
    q = meta(1, 2, 128, 64)
    trn2.add_signature("aten::_scaled_dot_product_flash_attention_for_cpu", "sdpa", (q, q, q, 0.0, True, None, None))
    g = job.graph_work("attention", trn2.kernels, {"sdpa": 1}, 0.0, trn2.device, trn2.calibration)
    scalar = 2 * 128 * 128 + 2 * 128 * 64 + 2 * 128  # the scores' exp; output and logsumexp out of PSUM
    assert g.engine_seconds_at_peak == pytest.approx(scalar / trn2.device.engine_elements_per_s["scalar"])


# --- the add_signature / summary contract ----------------------------------------------------
def test_summary_combines_signatures_with_call_counts(trn2):
    mm = trn2.add_signature("aten::mm", "mm", (meta(64, 128), meta(128, 32)))
    add = trn2.add_signature("aten::add.Tensor", "add", (meta(64, 32), meta(64, 32), 1))
    view = trn2.add_signature("aten::view", "view", (meta(64, 32), [2048]))
    s = trn2.summary({"mm": 5, "add": 3, "view": 7})
    launch = DEFAULTS["launch_seconds"]["eager"]
    assert s["label"] == "projected"
    assert s["launch_overhead_seconds"] == pytest.approx(8 * launch)  # views launch nothing
    assert s["kernel_seconds"] == pytest.approx(5 * mm.seconds + 3 * add.seconds)
    assert s["device_seconds"] == pytest.approx(s["kernel_seconds"] + 8 * launch)
    assert s["flops"] == 5 * 2 * 64 * 128 * 32
    assert s["by_op"]["aten::mm"]["calls"] == 5 and s["by_op"]["aten::view"]["kernel_seconds"] == 0
    assert s["by_engine"]["tensor"] == pytest.approx(5 * mm.seconds)
    assert s["compute_bound_seconds"] + s["memory_bound_seconds"] == pytest.approx(s["kernel_seconds"])
    assert s["mfu"] == pytest.approx(s["flops"] / (s["device_seconds"] * trn2.device.tensor_flops["bf16"]))
    assert view.seconds == 0
    json.dumps(s)


def test_a_known_key_keeps_its_first_projection(trn2):
    first = trn2.add_signature("aten::mm", "same", (meta(8, 8), meta(8, 8)))
    again = trn2.add_signature("aten::mm", "same", (meta(512, 512), meta(512, 512)))
    assert again is first


def test_contract_errors(trn2):
    with pytest.raises(P.ProjectionError, match="never added"):
        trn2.summary({"nope": 1})
    with pytest.raises(P.ProjectionError, match="not a qualified name"):
        trn2.add_signature("mm", "k", ())
    with pytest.raises(P.ProjectionError, match="not a registered operator"):
        trn2.add_signature("aten::no_such_op", "k", ())
    trn2.add_signature("aten::mm", "mm", (meta(4, 4), meta(4, 4)))
    with pytest.raises(P.ProjectionError, match="negative"):
        trn2.summary({"mm": -1})


def test_op_without_a_meta_output_keeps_its_input_bytes(trn2):
    cost = trn2.add_signature("aten::nonzero", "nz", (meta(1000, dtype=torch.float32),))
    assert not cost.outputs_known and cost.bytes == 4000 and cost.engine == "gpsimd"
    assert trn2.summary({"nz": 1})["ops_with_unknown_outputs"] == ["aten::nonzero"]


def test_real_tensors_are_projected_from_their_metadata(trn2):
    x = torch.randn(64, 64)
    assert trn2.add_signature("aten::mm", "cpu", (x, x)).flops == 2 * 64 ** 3


# --- a training step ----------------------------------------------------------------------------
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_decoder_training_step_flops_follow_6_params_tokens(attention):
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    layers, hidden, batch, seq = 2, 256, 2, 64
    config = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=688, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=seq,
                         tie_word_embeddings=False, attn_implementation=attention)
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 512, (batch, seq))
    params = sum(p.numel() for p in model.parameters()) - model.model.embed_tokens.weight.numel()
    tokens = batch * seq
    analytic = 6 * params * tokens + 12 * layers * batch * seq * seq * hidden  # + attention scores/values

    def step():
        model(input_ids=ids, labels=ids).loss.backward()

    with FlopCounterMode(display=False) as counter:
        step()
    projector = P.Projector("trn2.3xlarge", calibration=P.defaults())
    with P.ProjectionMode(projector) as mode:
        step()
    projected = projector.summary(mode.calls)
    if attention == "eager":  # FlopCounterMode has no formula for CPU's fused attention kernel
        assert projected["flops"] == counter.get_total_flops()  # PyTorch's formulas, not ours
    assert abs(projected["flops"] - analytic) / analytic < 0.10
    assert projected["by_op"]["aten::mm"]["engine"] == "tensor"
    assert projected["device_seconds"] > projected["kernel_seconds"] > 0


# --- compiled graphs ---------------------------------------------------------------------------
class _Pointwise(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2 + 1


def test_graph_counts_only_its_own_inputs_and_outputs(trn2):
    x = torch.randn(1 << 20)
    g = trn2.add_graph("pointwise", torch.fx.symbolic_trace(_Pointwise()), [x])
    with P.ProjectionMode(trn2) as mode:
        _Pointwise()(x)
    eager = trn2.summary(mode.calls)
    assert g.bytes == 2 * 4 * (1 << 20)  # x in, result out: intermediates stay on chip
    assert eager["by_op"]["aten::relu"]["bytes"] == g.bytes
    assert g.nodes == 3 and g.bound == "memory"
    assert g.seconds == pytest.approx(g.bytes / (trn2.device.hbm_bytes_per_s * DEFAULTS["efficiency"]["hbm"]))
    runs = trn2.graphs_summary({"pointwise": 4})
    assert runs["device_seconds"] == pytest.approx(4 * (g.seconds + DEFAULTS["launch_seconds"]["graph"]))
    assert runs["device_seconds"] < eager["device_seconds"] * 4
    with pytest.raises(P.ProjectionError, match="never added"):
        trn2.graphs_summary({"other": 1})


def test_fitted_graph_is_the_plans_graph_work_spill_included(monkeypatch):
    """With no calibration file the process projects with the factors fitted on published results,
    and a compiled graph costs what the plan's ``GraphWork`` does: its I/O, plus the intermediates
    its eager kernels would move in tensors too large for the core's SBUF (the ``_Pointwise`` graph:
    2 of 6 tensors are its I/O; at 4 MiB each the rest stay on chip, at 64 MiB they do not)."""
    from torch_neuronx.projection import job

    monkeypatch.delenv("TORCHNEURON_PROJECTION_CALIBRATION", raising=False)
    f = P.fitted_factors()
    proj = P.Projector("trn2.3xlarge")
    cal = proj.calibration
    assert (cal.efficiency["hbm"], cal.efficiency["vector"]) == (f.hbm_efficiency, f.engine_efficiency)
    assert proj.device.sbuf_bytes == 2 * 28 * 2**20  # LNC 2: two NeuronCore-v3 SBUFs of 28 MiB
    small = proj.add_graph("small", torch.fx.symbolic_trace(_Pointwise()), [torch.empty(1 << 20)])
    assert (small.bytes, small.intermediate_bytes) == (2 * 4 * (1 << 20), 0)
    x = torch.empty(1 << 24)
    g = proj.add_graph("pointwise", torch.fx.symbolic_trace(_Pointwise()), [x])
    size = 4 * (1 << 24)
    assert (g.bytes, g.intermediate_bytes) == (2 * size, 4 * size)  # relu, mul, add: 6 tensors moved eagerly
    hbm = proj.device.hbm_bytes_per_s
    assert g.memory_seconds == pytest.approx(6 * size / (hbm * f.hbm_efficiency))
    assert g.seconds == pytest.approx(max(g.compute_seconds, g.memory_seconds) + 3 * f.op_seconds)
    # one form: the plan builds the same GraphWork from the eager kernels of the same code,
    # and the projector's graph seconds are that GraphWork's seconds under the fitted factors
    with P.ProjectionMode(proj) as eager:
        _Pointwise()(x)
    plan_work = job.graph_work("pointwise", proj.kernels, eager.calls, g.bytes, proj.device, cal)
    assert dataclasses.astuple(plan_work) == pytest.approx(dataclasses.astuple(g.work))
    assert proj.graphs_summary({"pointwise": 1})["device_seconds"] == pytest.approx(plan_work.seconds(f))


_HLO_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4}
_HLO_CONVERT = re.compile(r"stablehlo\.convert .*: \(tensor<([\dx]+)x(\w+)>\) -> tensor<[\dx]+x(\w+)>")


def _converts_in(text: str) -> tuple[int, int]:
    """(count, bytes read + written) of the ``stablehlo.convert`` ops of a lowered graph."""
    found = _HLO_CONVERT.findall(text)
    return len(found), sum(math.prod(map(int, shape.split("x"))) * (_HLO_BYTES[a] + _HLO_BYTES[b])
                           for shape, a, b in found)


def test_a_compiled_graph_moves_its_casts_bytes_as_the_lowering_converts():
    """The eager device launches no kernel for a cast or a copy (``_to_copy``, ``clone``: native),
    but the same code compiled lowers each cast to a ``stablehlo.convert`` and a copy that keeps its
    dtype to nothing. The traced run counts the casts apart (``converts``), and a graph's work, from
    ``project_graph`` or from the plan's ``graph_work``, moves exactly the converts' bytes (counted
    here on a core without SBUF, so that every intermediate reaches HBM)."""
    pytest.importorskip("torch_mlir")
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_neuronx.compile.lowering import lower
    from torch_neuronx.projection import job

    def f(x, w):
        y = x.to(torch.bfloat16) @ w.to(torch.bfloat16)  # two casts
        return y.clone().float() + x.t().contiguous().t()  # a clone (nothing), a cast, a layout copy

    x, w = torch.randn(64, 128), torch.randn(128, 128)
    gm = make_fx(f, tracing_mode="fake")(x, w)
    converts, convert_bytes = _converts_in(lower.lower_fx_graph(gm).text)
    assert (converts, convert_bytes) == (3, (4 + 2) * (64 * 128 + 128 * 128 + 64 * 128))

    proj = P.Projector("trn2.3xlarge", calibration=P.defaults())
    proj.device = dataclasses.replace(proj.device, sbuf_bytes=0)
    with P.ProjectionMode(proj) as eager:
        f(x, w)
    assert sorted(proj.kernels[k].op for k in eager.calls) == ["aten::add.Tensor", "aten::contiguous", "aten::mm"]
    assert sum(eager.converts.values()) == converts
    assert sum(proj.kernels[k].bytes * n for k, n in eager.converts.items()) == convert_bytes

    g = proj.add_graph("casts", gm, [x, w])
    plan = job.graph_work("casts", proj.kernels, eager.calls, g.bytes, proj.device, proj.calibration,
                          converts=eager.converts)
    assert dataclasses.astuple(plan) == pytest.approx(dataclasses.astuple(g.work))
    mm_bytes, add_bytes = 2 * (64 * 128 + 128 * 128 + 64 * 128), 4 * 3 * 64 * 128
    assert g.bytes + g.intermediate_bytes == mm_bytes + add_bytes + convert_bytes  # no clone, no layout copy
    assert (g.nodes, g.work.kernels) == (2 + converts, 2)  # launches: mm and add, as the device's


def test_graph_flops_match_eager_flops_and_aten_graphs_work(trn2):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16))
    x = torch.randn(32, 64)
    dynamo_level = trn2.add_graph("mlp", torch.fx.symbolic_trace(model), [x])
    from torch.fx.experimental.proxy_tensor import make_fx

    aten_level = trn2.add_graph("mlp-aten", make_fx(model)(x), [x])
    assert dynamo_level.flops == aten_level.flops == 2 * 32 * (64 * 128 + 128 * 16)
    weights = sum(p.numel() for p in model.parameters())
    assert dynamo_level.bytes == aten_level.bytes == 4 * (32 * 64 + weights + 32 * 16)
    assert set(dynamo_level.engine_seconds) == {"tensor", "scalar"}
    assert dynamo_level.compute_seconds == pytest.approx(max(dynamo_level.engine_seconds.values()))
    serial = P.Projector("trn2.3xlarge", calibration=P.Calibration(
        **{**P.defaults().__dict__, "graph_engine_overlap": False}))
    g = serial.add_graph("mlp", torch.fx.symbolic_trace(model), [x])
    assert g.compute_seconds == pytest.approx(sum(g.engine_seconds.values()))


# --- collectives -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,factor,steps", [("all_reduce", lambda r: 2 * (r - 1) / r, lambda r: 2 * 4),
                                               ("all_gather", lambda r: (r - 1) / r, lambda r: 4),
                                               ("reduce_scatter", lambda r: (r - 1) / r, lambda r: 4),
                                               ("all_to_all", lambda r: (r - 1) / r, lambda r: r - 1)])
def test_collectives_follow_the_ring_bytes_and_halving_doubling_steps(kind, factor, steps):
    """16 ranks: a ring's share of the buffer, and the log2(16) = 4 steps of recursive halving
    (reduce-scatter) and doubling (all-gather) the runtime uses for small messages."""
    proj = P.Projector("trn2.48xlarge", calibration=P.defaults())
    nbytes, r = 256 << 20, 16
    rec = P.CollectiveRecord(kind, nbytes, r, "neuronlink")
    # one ring crosses each chip boundary over one of the chip's four NeuronLink-v3 links
    bw = chip_figure("trn2", "neuronlink_bytes_per_s") / 4 * DEFAULTS["efficiency"]["link"]
    expected = steps(r) * DEFAULTS["link_latency_seconds"]["neuronlink"] + factor(r) * nbytes / bw
    assert P.collective_seconds(rec, proj.device, proj.calibration) == pytest.approx(expected, rel=1e-12)
    assert P.collective_seconds(P.CollectiveRecord(kind, nbytes, 1, "chip"), proj.device, proj.calibration) == 0


def test_group_link_from_topology():
    d = P.device_model("trn2.48xlarge", lnc=2)  # 16 chips x 4 logical cores
    assert P.link_for_ranks(range(4), 64, d) == "chip"
    assert P.link_for_ranks(range(8), 64, d) == "neuronlink"
    assert P.link_for_ranks([0, 64], 64, d) == "efa"
    assert P.link_for_ranks([3, 4], 64, d) == "neuronlink"
    with pytest.raises(P.ProjectionError, match="ranks_per_instance"):
        P.link_for_ranks([0], 65, d)


def test_collective_errors():
    small = P.Projector("trn2.3xlarge", calibration=P.defaults())
    efa = P.CollectiveRecord("all_reduce", 1024, 2, "efa")
    with pytest.raises(P.ProjectionError, match="no efa bandwidth is known for trn2.3xlarge"):
        P.collective_seconds(efa, small.device, small.calibration)
    left_out = small.collectives_summary({efa: 3})  # a summary lists it instead of failing
    assert left_out["seconds"] == 0 and left_out["unprojected"]["efa"]["calls"] == 3
    assert "link_bytes_per_s.efa" in left_out["unprojected"]["efa"]["reason"]
    with pytest.raises(P.ProjectionError, match="not one of"):
        P.CollectiveRecord("allreduce", 1, 2, "chip")
    summary = small.collectives_summary([P.CollectiveRecord("all_reduce", 1 << 20, 4, "chip")] * 3)
    assert summary["by_kind"]["all_reduce"]["calls"] == 3 and summary["label"] == "projected"
    assert summary["seconds"] == pytest.approx(summary["by_link"]["chip"])


# --- compilation and cost --------------------------------------------------------------------------
def test_compile_is_one_model_for_kernels_and_graphs(trn2, monkeypatch):
    monkeypatch.delenv("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", raising=False)
    model = DATA["compile_time"]
    base, per_op = model["seconds_per_program"]["value"], model["seconds_per_op"]["value"]
    graphs = [P.GraphProgram(kernels=40, stablehlo_ops=300), P.GraphProgram(kernels=25)]
    c = trn2.compile(eager_kernels=12, graphs=graphs)
    # 12 one-kernel programs; a lowered graph by its StableHLO size; the other by its kernel count
    assert c.seconds == pytest.approx(12 * (base + per_op) + (base + 300 * per_op) + (base + 25 * per_op))
    assert (c.programs, c.eager_kernels, c.graphs, c.stablehlo_ops, c.kernel_ops) == (14, 12, 2, 300, 37)
    assert c.to_dict()["label"] == "projected" and "StableHLO" in c.basis
    monkeypatch.setenv("TORCHNEURON_COMPILE_SECONDS_PER_KERNEL", "5")
    assert trn2.compile(eager_kernels=2).seconds == pytest.approx(2 * (5 + per_op))
    with pytest.raises(ValueError):
        trn2.compile(eager_kernels=-1)


def test_cost_of_n_steps_at_a_price(trn2):
    c = trn2.cost(step_seconds=0.25, steps=1000, price_per_hour=7.2, compile_seconds=600)
    assert c.to_dict()["label"] == "projected"
    assert c.run_usd == pytest.approx(0.25 * 1000 * 7.2 / 3600)
    assert c.total_usd == pytest.approx((250 + 600) * 7.2 / 3600)
    assert trn2.cost(0.25, 1000, 7.2, instances=4).run_usd == pytest.approx(4 * c.run_usd)
    dated = trn2.cost(1.0, steps=3600)  # the dated third-party price of the table
    table = DATA["instances"]["trn2.3xlarge"]["prices"][0]
    assert dated.run_usd == pytest.approx(table["usd_per_hour"])
    assert dated.price.date == table["date"] and dated.price.source == table["source"]
    unpriced = P.Projector("trn3", calibration=P.defaults()).cost(1.0, steps=10)
    assert unpriced.run_usd is None and "no price" in unpriced.price.source
    with pytest.raises(ValueError):
        trn2.cost(1.0, price_per_hour=-1)


def test_snapshot_is_json_and_labelled_projected(trn2):
    trn2.add_signature("aten::mm", "mm", (meta(4096, 4096), meta(4096, 4096)))
    snap = trn2.snapshot(calls={"mm": 10}, collectives=[P.CollectiveRecord("all_reduce", 1 << 26, 4, "chip")],
                         eager_kernels=1, steps=100)
    data = json.loads(json.dumps(snap))
    for section in ("eager", "graphs", "collectives", "compile", "cost", "device"):
        assert data[section]["label"] == "projected", section
    comm = data["collectives"]["seconds"]
    compute = data["eager"]["device_seconds"]
    assert data["step"]["seconds"] == pytest.approx(compute + comm)
    assert data["step"]["seconds_full_overlap"] == pytest.approx(max(compute, comm))
    assert data["cost"]["run_seconds"] == pytest.approx(100 * (compute + comm))
    assert data["cost"]["compile_seconds"] == data["compile"]["seconds"] > 0


# --- calibration ---------------------------------------------------------------------------------
def test_calibration_replaces_defaults(tmp_path, monkeypatch):
    cal = calibration_file(tmp_path, measured_on="trn2.3xlarge, 2026-12-01", efficiency={"tensor": 0.5},
                           launch_seconds={"eager": 1e-5}, ops={"aten::bmm": {"efficiency": 0.25}})
    assert cal.efficiency["hbm"] == DEFAULTS["efficiency"]["hbm"]  # untouched fields keep defaults
    proj = P.Projector("trn2.3xlarge", calibration=cal)
    base = P.Projector("trn2.3xlarge", calibration=P.defaults())
    args = (meta(4096, 4096), meta(4096, 4096))
    bargs = (meta(8, 1024, 1024), meta(8, 1024, 1024))
    assert proj.add_signature("aten::mm", "mm", args).seconds == pytest.approx(
        base.add_signature("aten::mm", "mm", args).seconds * DEFAULTS["efficiency"]["tensor"] / 0.5)
    assert proj.add_signature("aten::bmm", "bmm", bargs).compute_seconds == pytest.approx(
        base.add_signature("aten::bmm", "bmm", bargs).compute_seconds * DEFAULTS["efficiency"]["tensor"] / 0.25)
    assert proj.summary({"mm": 2})["launch_overhead_seconds"] == pytest.approx(2e-5)
    assert "measured on trn2.3xlarge" in proj.describe()["calibration"]
    monkeypatch.setenv("TORCHNEURON_PROJECTION_CALIBRATION", str(tmp_path / "cal.json"))
    assert P.active_calibration().efficiency["tensor"] == 0.5


def test_retired_compile_seconds_per_graph_is_ignored_with_one_warning(tmp_path):
    """Older calibration files still load: the retired field changes nothing and says so once."""
    with pytest.warns(UserWarning, match=r"compile_seconds_per_graph is ignored") as caught:
        old = calibration_file(tmp_path, efficiency={"tensor": 0.5}, compile_seconds_per_graph=40.0)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert not hasattr(old, "compile_seconds_per_graph") and old.efficiency["tensor"] == 0.5
    proj = P.Projector("trn2.3xlarge", calibration=old)
    assert proj.compile(eager_kernels=3).seconds == P.project_compile(eager_kernels=3).seconds


@pytest.mark.parametrize("fields,message", [
    ({"efficiency": {"tensor": 0}}, r"efficiency.tensor = 0 must be in \(0, 1\]"),
    ({"efficiency": {"tensor": 1.5}}, "must be in"),
    ({"efficiency": {"tensorE": 0.5}}, "unknown key"),
    ({"launch_seconds": {"eager": -1}}, "must be >= 0"),
    ({"ops": {"aten::mm": {"engine": "warp"}}}, "is not one of"),
    ({"ops": {"aten::mm": {}}}, "must be an object with some of"),
    ({"graph_engine_overlap": "yes"}, "true or false"),
    ({"speed": 2}, "unknown field"),
])
def test_calibration_errors_name_the_field(tmp_path, fields, message):
    with pytest.raises(P.CalibrationError, match=message):
        calibration_file(tmp_path, **fields)


def test_calibration_file_errors(tmp_path):
    with pytest.raises(P.CalibrationError, match="cannot read"):
        P.load_calibration(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(P.CalibrationError, match="not valid JSON"):
        P.load_calibration(bad)
    bad.write_text('{"efficiency": {}}')
    with pytest.raises(P.CalibrationError, match='"schema": 1'):
        P.load_calibration(bad)


# --- timeline ---------------------------------------------------------------------------------
def test_chrome_trace_has_engine_and_collective_tracks(trn2, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.SiLU())
    x = torch.randn(16, 64)
    with P.ProjectionMode(trn2) as mode:
        model(x)
    trn2.add_graph("g", torch.fx.symbolic_trace(model), [x])
    rec = P.CollectiveRecord("all_reduce", 1 << 20, 4, "chip")
    path = P.write_chrome_trace(trn2, mode.sequence + [rec, ("graph", "g")], tmp_path / "trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"tensor", "vector", "scalar", "gpsimd", "dma", "collectives"} <= tracks
    slices = [e for e in events if e["ph"] == "X"]
    assert all(e["args"]["label"] == "projected" for e in slices)
    eager = trn2.summary(mode.calls)["device_seconds"]
    eager_slices = [e for e in slices if e["name"] != "all_reduce" and e["name"] not in ("g", "launch g")]
    assert sum(e["dur"] for e in eager_slices) == pytest.approx(eager * 1e6)
    comm = [e for e in slices if e["name"] == "all_reduce"]
    assert len(comm) == 1 and comm[0]["ts"] == pytest.approx(eager * 1e6)
    with pytest.raises(P.ProjectionError, match="cannot place"):
        P.chrome_trace(trn2, [42])


def test_default_projector_snapshot_and_reset():
    proj = P.get_projector()
    assert P.get_projector() is proj
    proj.add_signature("aten::mm", "default-mm", (meta(8, 8), meta(8, 8)))
    assert P.snapshot(calls={"default-mm": 1})["eager"]["flops"] == 2 * 8 ** 3
    P.reset()
    with pytest.raises(P.ProjectionError):
        P.snapshot(calls={"default-mm": 1})
    assert math.isfinite(P.snapshot()["step"]["seconds"])


def test_bytes_are_counted_as_pytorch_runtime_estimator_counts_them():
    from torch.utils._runtime_estimation import get_num_bytes

    from torch_neuronx.projection.kernel import tensor_bytes

    base = torch.randn(64, 32)
    for t in (base, base.t(), base[:, :1].expand(64, 32), base[::2], torch.randn(()), base.to(torch.bfloat16)):
        assert tensor_bytes(t) == get_num_bytes(t)


def test_the_neuron_process_group_records_its_collectives():
    import torch.distributed as dist

    P.reset()
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.ones(1024, device="neuron")
        dist.all_reduce(t)
        dist.all_reduce(t)
        out = torch.empty(1024, device="neuron")
        dist.all_gather_single(out, t)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    counts = dict(P.COLLECTIVE_LOG.counts)
    assert counts[P.CollectiveRecord("all_reduce", 4096, 1, "chip")] == 2
    assert counts[P.CollectiveRecord("all_gather", 4096, 1, "chip")] == 1
    assert counts[P.CollectiveRecord("barrier", 0, 1, "chip")] == 1
    snap = P.snapshot()
    assert snap["collectives"]["by_kind"]["all_reduce"]["calls"] == 2
    assert snap["collectives"]["seconds"] == 0  # a group of one moves nothing
    P.reset()
    assert not P.COLLECTIVE_LOG.counts


def test_op_overrides_match_without_the_overload_and_reach_dma(tmp_path):
    cal = calibration_file(tmp_path, ops={"aten::add": {"engine": "scalar", "launch_seconds": 0},
                                          "aten::cat": {"efficiency": 0.1}})
    proj = P.Projector("trn2.3xlarge", calibration=cal)
    add = proj.add_signature("aten::add.Tensor", "add", (meta(1 << 20), meta(1 << 20), 1))
    assert add.engine == "scalar" and proj.launch_seconds(add) == 0
    cat = proj.add_signature("aten::cat", "cat", ([meta(1 << 20), meta(1 << 20)], 0))
    dma = proj.device.dma_bytes_per_s * 0.1
    assert cat.engine == "dma" and cat.seconds == pytest.approx(cat.bytes / dma)


def test_a_short_argument_list_loses_outputs_not_the_call(trn2):
    cost = trn2.add_signature("aten::addmm", "short", (meta(16), meta(8, 16)))  # mat2 missing
    assert not cost.outputs_known and cost.flops == 0 and cost.bytes == (16 + 8 * 16) * 2
    with pytest.raises(P.ProjectionError, match="aten::mm takes 2 arguments, got 4"):
        trn2.add_signature("aten::mm", "long", (meta(2, 2), meta(2, 2), 1, 2))


def test_a_neuron_run_projects_as_its_cpu_reference():
    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
        model = model.to(device)
        proj = P.Projector("trn2.3xlarge", calibration=P.defaults())
        with P.ProjectionMode(proj) as mode:
            model(torch.randn(32, 64, device=device)).sum().backward()
        return proj.summary(mode.calls)

    cpu, neuron = run("cpu"), run("neuron")
    assert neuron["flops"] == cpu["flops"] == 3 * 2 * 32 * (64 * 128 + 128 * 8) - 2 * 32 * 64 * 128
    assert neuron["device_seconds"] == pytest.approx(cpu["device_seconds"])


def test_collective_log_places_ranks_beyond_one_instance_on_efa(monkeypatch):
    class Group:  # a group c10d does not know: ranks 0..size-1
        def size(self):
            return 6

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("TORCHNEURON_INSTANCE", "trn2.3xlarge")  # 4 logical cores
    log = P.CollectiveLog()
    rec = log.record("all_reduce", [torch.ones(8)], Group())
    assert rec == P.CollectiveRecord("all_reduce", 32, 6, "efa")
    log.record("reduce_scatter_tensor", [torch.ones(8)], Group())
    assert log.counts[P.CollectiveRecord("reduce_scatter", 6 * 32, 6, "efa")] == 1


def test_one_hardware_table_feeds_profiles_nki_and_the_projection():
    """Each chip figure is held once (hardware.json): the instance profiles, the NKI limits and
    the projection's device model agree (the NKI table once said 362.5 GB/s of DMA per trn2
    core where the projection said 437.5)."""
    from torch_neuronx.nki import hardware as nki_hardware

    for instance in ("trn1.2xlarge", "trn2.48xlarge", "trn3"):
        profile = get_profile(instance)
        entry = DATA["instances"][instance]
        target = DATA["targets"][entry["target"]]
        assert profile.chips == entry["chips"]["value"]
        assert profile.cores_per_chip == target["physical_cores_per_chip"]["value"]
        assert profile.hbm_per_chip == target["per_chip"]["hbm_capacity_bytes"]["value"]
        device = P.device_model(instance, lnc=1)  # one physical core
        limits = nki_hardware.limits(entry["target"])
        assert limits["dma_bytes_per_s"] == device.dma_bytes_per_s
        # TensorE peak = 128 x 128 PEs x 2 FLOP x the TensorE clock NKI uses
        assert device.tensor_flops["bf16"] == pytest.approx(128 * 128 * 2 * limits["tensor_hz"], rel=1e-5)
    assert nki_hardware.limits("trn2")["dma_bytes_per_s"] == pytest.approx(3.5e12 / 8)


# --- ProjectionMode counts what the eager device launches (projection/device_dispatch.py) ------------
def _kernels_of(step) -> list[str]:
    """The ops ProjectionMode records for ``step``, in launch order."""
    proj = P.Projector("trn2.3xlarge", calibration=P.defaults())
    with P.ProjectionMode(proj) as mode:
        step()
    return [proj.kernels[k].op for k in mode.sequence]


def test_views_launch_nothing_and_a_strided_input_adds_a_contiguous_kernel():
    """The real product whitelists views (no kernel: TR csrc/core/NeuronBindings.cpp:170-229) and makes
    a non-contiguous input contiguous by its own kernel first (NeuronBindings.cpp:87-140,
    argument_processor.py:77-98)."""
    a, b = torch.randn(8, 4), torch.randn(8, 4)
    assert _kernels_of(lambda: a.view(32).reshape(4, 8).t().unsqueeze(0).expand(2, 8, 4).detach()) == []
    assert _kernels_of(lambda: torch.mm(a.t(), b)) == ["aten::contiguous", "aten::mm"]
    assert _kernels_of(lambda: torch.mm(a.t().contiguous(), b)) == ["aten::mm"]  # clone: a native copy
    proj = P.Projector("trn2.3xlarge", calibration=P.defaults())
    with P.ProjectionMode(proj) as mode:
        torch.mm(a.t(), b)
    copy = next(proj.kernels[k] for k in mode.calls if proj.kernels[k].op == "aten::contiguous")
    assert (copy.engine, copy.bytes) == ("dma", 2 * a.numel() * a.element_size())  # read and written once


def test_composite_ops_launch_the_kernels_they_call_and_empty_inputs_none():
    """The device runs a composite op as the ops it calls (embedding is an index_select, a
    Python number in a tensor argument is a wrapped 0-dim tensor); an empty input compiles
    nothing (TR python_ops/torch_mlir/kernel.py:818-844)."""
    weight, ids = torch.randn(16, 4), torch.tensor([[1, 2, 3]])
    assert _kernels_of(lambda: torch.nn.functional.embedding(ids, weight)) == ["aten::index_select"]
    assert _kernels_of(lambda: torch.empty(0, 4) * 2) == []
    x = torch.randn(4)
    proj = P.Projector("trn2.3xlarge", calibration=P.defaults())
    with P.ProjectionMode(proj) as mode:
        x + 1
        x + 2.5  # another value, another type: a float64 wrapped number, another key
        x + 3
    assert sorted(mode.calls.values()) == [1, 2]


def _overload(name: str):
    """``aten::add.Tensor`` → ``torch.ops.aten.add.Tensor``."""
    op, _, overload = name[len("aten::"):].partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


def test_the_trace_reads_the_fallbacks_module_init_routing_from_the_device():
    """``device_dispatch`` takes the ops the fallback routed at module init by name from ``_C``
    (``route_ops_to_fallback``; no Python copy of its rule): each is registered for the device, is
    a structured op (a CPU kernel behind PyTorch's out= wrapper) or a foreach op the real product
    runs as one kernel, and the trace counts it as a kernel."""
    from torch_neuronx.projection import device_dispatch as D
    from torch_neuronx.runtime.extension import _C

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    routed = _C._ops_routed_to_fallback()
    assert len(routed) == len(set(routed)) > 100
    for name in routed:
        structured = has(name, "CPU") and has(name, "CompositeExplicitAutogradNonFunctional")
        assert has(name, "PrivateUse1") and (structured or name.startswith("aten::_foreach_")), name
        assert D.route(_overload(name)) == D.KERNEL, name
    assert {"aten::atan2", "aten::_foreach_add_.List", "aten::_foreach_norm.Scalar"} <= set(routed)
    # in-place ScalarList foreach ops loop per tensor; add has its own fast-path kernel
    assert not {"aten::_foreach_div_.ScalarList", "aten::add.Tensor"} & set(routed)
    registered = [n for n in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
                  if n.startswith("aten::")]
    native = {n for n in registered if D.route(_overload(n)) == D.NATIVE}
    assert {"aten::view", "aten::as_strided", "aten::_copy_from", "aten::clone", "aten::_to_copy"} <= native
    assert not native & {"aten::mm", "aten::native_layer_norm", "aten::_foreach_add.List", "aten::atan2"}


def test_native_kernels_accounting_their_composite_are_traced_as_that_composite():
    """``_C._ops_accounted_as_composite()`` (csrc/aten/NativeRoutes.cpp) names the native kernels
    that compute on the host but account their composite's kernels: each is registered for the
    device and has a composite kernel, and the trace follows that composite, not a launch-free native."""
    from torch_neuronx.projection import device_dispatch as D
    from torch_neuronx.runtime.extension import _C

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = [n if "::" in n else f"aten::{n}" for n in _C._ops_accounted_as_composite()]
    assert {"aten::scalar_tensor", "aten::arange", "aten::arange.start_step"} <= set(names)
    for name in names:
        assert has(name, "PrivateUse1"), name
        assert D.composite_key(_overload(name)) is not None, name
        assert D.route(_overload(name)) == D.COMPOSITE, name
    assert D.route(torch.ops.aten.empty_strided.default) == D.NATIVE  # a native kernel that launches nothing
