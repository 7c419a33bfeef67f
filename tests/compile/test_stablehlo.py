"""Lowering to StableHLO with torch-mlir, as the real product does (TR
neuron_dynamo_backend/fx/fx_transform.py:184-237; TR: ARCHITECTURE.md, "How the real product is cited").

Compiled graphs: every forward/backward graph is lowered, its key is the hash of
the StableHLO text, artifacts are written on request, and a graph that does not
lower fails with the real message or falls back when allowed. Eager kernels:
``lower_kernel`` and the per-signature collector.
"""
from __future__ import annotations

import hashlib
import re

import pytest
import torch
import torch._dynamo
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import torch_neuronx
from torch_neuronx.compile import cache
from torch_neuronx.compile.lowering import custom_calls, decompositions, lower
from torch_neuronx.compile.kernel_lowering import KernelLoweringCollector, lower_kernel
from torch_neuronx.projection import graph_compile_seconds

pytest.importorskip("torch_mlir")

# torch-mlir 20261001 has no StableHLO lowering for aten.erfinv (nor do Inductor's
# decompositions remove it), so a graph using it cannot compile on Trainium.
NOT_LOWERING_OP = torch.erfinv


@pytest.fixture(autouse=True)
def _fresh(fresh_dynamo, private_neff_cache, monkeypatch):
    """Fresh Dynamo state, an empty NEFF cache, fallback execution and graph lowering at their defaults."""
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    monkeypatch.delenv("TORCHNEURON_LOWER_GRAPHS", raising=False)  # on by default


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))


def _train_step(model: nn.Module, **compile_kwargs) -> torch.Tensor:
    compiled = torch.compile(model, backend="neuron", fullgraph=True, **compile_kwargs)
    out = compiled(torch.randn(8, 16).to("neuron"))
    out.square().sum().backward()
    return out


def test_forward_and_backward_graphs_are_lowered_with_real_records(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "debug"))
    _train_step(_mlp().to("neuron"), options={"model_name": "TinyMLP"})
    metrics = torch_neuronx.get_dynamo_metrics()
    records = metrics["compiled_graphs"]
    assert [r["graph_name"].rsplit("_", 2)[-2] for r in records] == ["forward", "backward"]
    for record in records:
        assert re.fullmatch(r"TinyMLP_\d+_(forward|backward)_\d+", record["graph_name"])
        assert record["model_name"] == "TinyMLP" and record["has_collectives"] is False
        assert re.fullmatch(r"[0-9a-f]{64}", record["graph_id"])
        assert record["lowering"] == "lowered" and record["stablehlo_op_count"] > 10
        assert record["graph_node_count"] > 5 and record["timings"] == "host"
        assert record["torch_neuronx_lower_us"] > 0 and record["torch_neuronx_compile_us"] > 0
        assert record["neff_cache"] == "compiled"
        assert record["estimated_compile_s"] == graph_compile_seconds(record["stablehlo_op_count"],
                                                                      record["graph_node_count"])
        # The artifact is the StableHLO the key was computed from
        # (TR neuron_dynamo_backend/utils/stablehlo_utils.py:14-56).
        artifact = tmp_path / "debug" / "stablehlo" / "proc_0" / f"{record['graph_name'].lower()}.stablehlo.mlir"
        text = artifact.read_text()
        assert text.startswith("module") and "stablehlo.dot_general" in text
        assert "loc(" not in text
    assert metrics["stablehlo_ops"] == sum(r["stablehlo_op_count"] for r in records)
    assert torch._dynamo.utils.counters["neuron"]["compiled_graphs"] >= 2


def test_graph_key_is_the_stablehlo_text_plus_io_and_compiler_suffix(monkeypatch):
    x = torch.randn(4, 8, device="neuron")

    def key_of(fn, arg):
        torch._dynamo.reset()
        torch_neuronx.reset_dynamo_metrics()
        torch.compile(fn, backend="neuron")(arg)
        (record,) = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
        return record

    first = key_of(torch.tanh, x)
    again = key_of(torch.tanh, x)
    assert again["graph_id"] == first["graph_id"] and again["neff_cache"] == "memory hit"
    assert again["estimated_compile_s"] == 0.0
    assert key_of(torch.tanh, torch.randn(5, 8, device="neuron"))["graph_id"] != first["graph_id"]
    assert key_of(torch.sigmoid, x)["graph_id"] != first["graph_id"]
    monkeypatch.setenv("NEURON_CC_FLAGS", "--enable-fast-loading")
    flagged = key_of(torch.tanh, x)
    assert flagged["graph_id"] != first["graph_id"] and flagged["neff_cache"] == "compiled"


def test_graph_that_does_not_lower_raises_the_real_error_by_default():
    x = torch.randn(4, device="neuron")
    with pytest.raises(Exception) as info:
        torch.compile(NOT_LOWERING_OP, backend="neuron")(x)
    # TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION defaults to True
    # (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/env-vars.html).
    cause = info.value.inner_exception  # Dynamo's BackendCompilerFailed wraps what the backend raised
    assert isinstance(cause, RuntimeError)
    assert str(cause).startswith("Neuron backend NEFF execution setup failed with unexpected error:")
    assert "no lowering for torch.aten.erfinv" in str(cause)
    assert torch_neuronx.get_dynamo_metrics()["compiled_graphs"] == []


@pytest.mark.parametrize(
    "env, options",
    [("0", None), ("1", {"fallback_execution": True})],
    ids=["env-allows-fallback", "option-overrides-env"],
)
def test_graph_that_does_not_lower_runs_eagerly_when_fallback_is_on(monkeypatch, neuron_log, env, options):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", env)
    x = torch.rand(6, device="neuron") - 0.5
    out = torch.compile(NOT_LOWERING_OP, backend="neuron", options=options)(x)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), torch.erfinv(x.cpu()))
    messages = [(r.levelname, r.getMessage()) for r in neuron_log]
    assert ("WARNING", "Falling back to original GraphModule execution") in messages
    assert any(level == "ERROR" and m.startswith("Execution failed:") and "torch.aten.erfinv" in m
               for level, m in messages)
    assert len(torch_neuronx.get_dynamo_metrics()["fallbacks"]) == 1


def test_fallback_option_false_overrides_env(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    with pytest.raises(Exception, match="Neuron backend NEFF execution setup failed"):
        torch.compile(NOT_LOWERING_OP, backend="neuron", options={"fallback_execution": False})(
            torch.rand(3, device="neuron"))


def test_without_torch_mlir_one_warning_and_not_checked(monkeypatch):
    monkeypatch.setattr(lower, "_installed", lambda: False)
    monkeypatch.setattr(lower, "_warned_missing", False)
    with pytest.warns(RuntimeWarning, match="torch-mlir is not installed") as caught:
        _train_step(_mlp().to("neuron"))
        result = lower_kernel("aten::add.Tensor", (torch.empty(2, device="meta"), torch.empty(2, device="meta")))
    assert len([w for w in caught if "torch-mlir" in str(w.message)]) == 1
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert len(records) == 2
    assert all(r["lowering"] == "not checked" and r["stablehlo_op_count"] is None for r in records)
    assert all(re.fullmatch(r"[0-9a-f]{64}", r["graph_id"]) for r in records)
    assert result.lowered is None and "not checked" in result.reason


@pytest.fixture
def graphs_fail_unnamed(monkeypatch):
    """torch-mlir failing on every graph of more than one op without naming a cause (an internal
    error, as its slice_scatter lowering once did with std::bad_alloc); single kernels lower as usual."""
    from torch_mlir import fx as mlir_fx

    real = mlir_fx.stateless_fx_import

    def import_(gm, *args, **kwargs):
        if sum(n.op == "call_function" for n in gm.graph.nodes) > 1:
            raise RuntimeError("std::bad_alloc")
        return real(gm, *args, **kwargs)

    monkeypatch.setattr(mlir_fx, "stateless_fx_import", import_)


def test_unnamed_failure_is_traced_to_the_op_that_does_not_lower(graphs_fail_unnamed):
    x = torch.rand(4, device="neuron") * 0.5
    with pytest.raises(Exception) as info:
        torch.compile(lambda t: NOT_LOWERING_OP(t.sin()).cos(), backend="neuron")(x)
    message = str(info.value)
    assert "no lowering for torch.aten.erfinv (found by lowering aten::erfinv alone" in message
    assert "Neuron backend NEFF execution setup failed" in message


def test_unnamed_failure_with_every_op_lowering_alone_is_not_checked(graphs_fail_unnamed, neuron_log):
    x = torch.rand(4, device="neuron")
    out = torch.compile(lambda t: t.sin().cos(), backend="neuron")(x)
    torch.testing.assert_close(out.cpu(), x.cpu().sin().cos())
    (record,) = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert record["lowering"] == "not checked (torch-mlir failed without naming an op; each op lowers alone)"
    assert any(r.getMessage().endswith("not checked for StableHLO: torch-mlir could not lower the graph to StableHLO: "
                                       "std::bad_alloc") for r in neuron_log)


def test_lowering_switched_off_compiles_unchecked(monkeypatch):
    """TORCHNEURON_LOWER_GRAPHS=0: nothing goes through torch-mlir, so a graph that would not
    compile on Trainium runs; records say why nothing was checked."""
    monkeypatch.setenv("TORCHNEURON_LOWER_GRAPHS", "0")
    monkeypatch.setattr(lower, "lower_fx_graph", lambda *a, **k: pytest.fail("lowered while switched off"))
    x = torch.rand(5) * 1.8 - 0.9
    out = torch.compile(NOT_LOWERING_OP, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), NOT_LOWERING_OP(x))
    (record,) = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert record["lowering"] == "not checked (TORCHNEURON_LOWER_GRAPHS=0)"
    assert record["stablehlo_op_count"] is None and re.fullmatch(r"[0-9a-f]{64}", record["graph_id"])


def test_graph_with_a_list_default_argument_lowers(monkeypatch):
    """amax's schema (``int[1] dim=[]``) is not hashable; finding custom calls must not need it to
    be (a Llama training graph failed to compile on this)."""
    monkeypatch.setattr(custom_calls, "_CUSTOM_CALLS", {"myns::kernel"})
    gm = make_fx(lambda x: torch.amax(x, dim=1) + 1)(torch.randn(3, 4))
    assert any(n.target is torch.ops.aten.amax.default for n in gm.graph.nodes)
    assert custom_calls.custom_calls_in(gm) == []
    x = torch.randn(3, 4)
    out = torch.compile(lambda t: torch.amax(t, dim=1) * 2, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), torch.amax(x, dim=1) * 2)
    (record,) = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert record["lowering"] == "lowered"


def _mixed(x, base, src):
    """Views of contiguous and strided tensors, ops torch-mlir decomposes (sum, full,
    squeeze.dim, slice_scatter with an unclamped end) and ops it lowers directly."""
    strided = x[:, :3].view(2, 2, 3)  # a view of a non-contiguous slice
    total = x.sum() + torch.full((2, 2, 3), 2.0)
    scattered = torch.ops.aten.slice_scatter.default(base, src, 1, 4, 2**63 - 1)
    return (strided * total).squeeze(0).view(12), scattered.view(-1).softmax(0)


def test_decomposing_node_by_node_gives_the_text_of_a_whole_retrace():
    """Only the nodes torch-mlir's table names are traced (a whole-graph re-trace cost seconds
    per graph); the StableHLO must be the one a re-trace of the whole graph gives."""
    inputs = (torch.randn(4, 6), torch.zeros(3, 8), torch.ones(3, 4))
    gm = make_fx(_mixed, tracing_mode="fake")(*inputs)
    whole = make_fx(torch.fx.Interpreter(gm).run, decomposition_table=decompositions.lowering_table(),
                    tracing_mode="fake")(*decompositions.fake_cpu_twins(inputs))
    node_by_node = decompositions.decomposed(gm)
    targets = {n.target for n in node_by_node.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.view.default not in targets and torch.ops.aten.sum.default not in targets
    assert lower.lower_fx_graph(gm).text == lower.lower_fx_graph(whole, decompose=False).text
    torch.testing.assert_close(node_by_node(*inputs), _mixed(*inputs))


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_lower_kernel_lowers_functional_and_inplace_ops():
    add = lower_kernel("aten::add.Tensor", (_meta(4, 4), _meta(4, 4)))
    assert add.lowered is True and add.stablehlo_op_count == 1
    inplace = lower_kernel("aten::add_.Tensor", (_meta(4, 4), _meta(4)), {"alpha": 2})
    assert inplace.lowered is True and inplace.stablehlo_op_count >= 2  # broadcast, scale, add
    relu = lower_kernel("aten::relu", (_meta(3, dtype=torch.bfloat16),))
    assert relu.lowered is True and relu.stablehlo_op_count >= 1


def test_lower_kernel_reports_why_an_op_does_not_lower():
    erfinv = lower_kernel("aten::erfinv", (_meta(4),))
    assert erfinv.lowered is False and erfinv.stage == "lower"
    assert "no lowering for torch.aten.erfinv" in erfinv.reason
    nonzero = lower_kernel("aten::nonzero", (_meta(4),))  # data-dependent output shape
    assert nonzero.lowered is False and nonzero.stage == "trace"
    bogus = lower_kernel("aten::no_such_op", (_meta(4),))
    assert bogus.lowered is False and bogus.stage == "resolve" and "no operator" in bogus.reason
    malformed = lower_kernel("add", (_meta(4),))
    assert malformed.stage == "resolve" and "namespace::name" in malformed.reason


def test_collector_lowers_each_signature_once_and_reports_fallbacks(monkeypatch):
    import torch_neuronx.compile.kernel_lowering as kl

    calls = []
    real = kl.lower_kernel
    monkeypatch.setattr(kl, "lower_kernel", lambda op, args, kwargs=None: calls.append(op) or real(op, args, kwargs))
    collector = KernelLoweringCollector()
    x = torch.randn(4, 4, device="neuron")  # device tensors are described as meta before tracing
    for _ in range(3):
        collector.on_signature("aten::mul.Tensor", "mul-4x4", (x, x))
    collector.on_signature("aten::erfinv", "erfinv-4x4", (x,))
    collector.on_signature("aten::mul.Tensor", "mul-4", (x[0], x[0]))
    assert calls == ["aten::mul.Tensor", "aten::erfinv", "aten::mul.Tensor"]
    report = collector.report()
    assert report["signatures"] == 3 and report["signatures_lowered"] == 2
    assert report["stablehlo_ops_per_op"] == {"aten::mul.Tensor": 2}
    assert list(report["would_fall_back_to_cpu"]) == ["aten::erfinv"]
    assert "would fall back to CPU" in report["would_fall_back_to_cpu"]["aten::erfinv"]
    collector.clear()
    assert collector.report()["signatures"] == 0


@pytest.mark.parametrize("start, end, bounds", [
    (8, 2**63 - 1, (8, 16)),  # x[..., 8:] in a backward graph (Llama's rotate_half)
    (-8, None, (8, 16)),
    (4, 12, (4, 12)),  # already in bounds: unchanged
    (12, 4, (12, 12)),  # empty, as PyTorch clamps it
])
def test_slice_scatter_bounds_are_clamped_before_lowering(start, end, bounds):
    """torch-mlir builds slice_scatter's index constant from start to the unclamped end: with the
    "to the end" sentinel 2**63 - 1 its lowering grew until the OOM killer ended it (17 GB on a tiny
    Llama's backward graph). The re-trace clamps the bounds, values unchanged."""
    base, src = torch.randn(2, 16), torch.randn(2, bounds[1] - bounds[0])

    def scatter(b, s):
        return torch.ops.aten.slice_scatter(b, s, -1, start, end) * 2

    graph = decompositions.decomposed(make_fx(scatter, tracing_mode="fake")(base, src))
    (node,) = [n for n in graph.graph.nodes if n.target is torch.ops.aten.slice_scatter.default]
    assert tuple(node.args[3:5]) == bounds
    torch.testing.assert_close(graph(base, src), scatter(base, src))
    lowered = lower.lower_fx_graph(graph, decompose=False)
    assert lowered.op_count < 10 and f"tensor<{bounds[1] - bounds[0]}x1xi64>" in lowered.text


def test_eager_slice_backward_kernel_lowers_with_clamped_bounds():
    """The eager kernel of the same backward (``slice_backward`` decomposes to ``slice_scatter``)."""
    grad = torch.randn(2, 8)
    trace = make_fx(lambda g: torch.ops.aten.slice_backward(g, [2, 16], 1, 8, 2**63 - 1, 1),
                    decomposition_table=decompositions.torch_mlir_decompositions(), tracing_mode="fake")
    (node,) = [n for n in trace(grad).graph.nodes if n.target is torch.ops.aten.slice_scatter.default]
    assert tuple(node.args[2:5]) == (1, 8, 16)
    result = lower_kernel("aten::slice_backward", (_meta(2, 8), [2, 16], 1, 8, 2**63 - 1, 1))
    assert result.lowered is True and result.stablehlo_op_count < 10


def test_graph_key_recomputes_from_artifact_text():
    # The key function itself: text, I/O and compiler configuration all enter the hash.
    x = torch.empty(2, 3)
    base = cache.graph_key("module {}", [x], [x], {"target": "trn2"})
    assert base == cache.graph_key("module {}", [torch.zeros(2, 3)], [x], {"target": "trn2"})
    assert base != cache.graph_key("module { }", [x], [x], {"target": "trn2"})
    assert base != cache.graph_key("module {}", [x.double()], [x], {"target": "trn2"})
    assert base != cache.graph_key("module {}", [x], [x], {"target": "trn1"})
    assert len(base) == len(hashlib.sha256().hexdigest())


@pytest.mark.slow
def test_opinfo_sweep_classifies_ops_and_writes_the_docs_section(tmp_path):
    from tools import opinfo_lowering

    result = opinfo_lowering.sweep({"add", "erfinv", "nonzero"})
    ops = result["ops"]
    assert ops["add"]["status"] == "lowers" and "aten::add.Tensor" in ops["add"]["kernels"]
    assert ops["erfinv"]["status"] == "does not lower" and "aten::erfinv" in ops["erfinv"]["failing_kernels"]
    assert ops["nonzero"]["status"] == "does not lower"  # data-dependent output shape
    assert (result["ops_checked"], result["ops_lowering"]) == (3, 1)
    doc = tmp_path / "compile.md"
    doc.write_text(f"before\n{opinfo_lowering.BEGIN}\nstale\n{opinfo_lowering.END}\nafter\n")
    opinfo_lowering.write_docs(result, doc)
    text = doc.read_text()
    assert "stale" not in text and text.startswith("before\n") and text.endswith("after\n")
    assert "**1 of 3 ops lower (33.3%)**" in text
    assert "| `erfinv` | `aten::erfinv` | no lowering for `torch.aten.erfinv` |" in text
