"""One registry of counters and timers: every store reports into it, the
facade reads it the torch_xla way, and ``torch_neuronx.metrics()`` is built from it."""
import pytest
import torch

import torch_neuronx
import torch_neuronx.debug.metrics as met
from torch_neuronx.runtime import metrics_registry as registry

pytestmark = pytest.mark.fast

KINDS = (f"[{registry.HOST}]", f"[{registry.EMULATED}]")


@pytest.fixture(autouse=True)
def _accounting_on():
    assert torch_neuronx.kernel_accounting_enabled()
    torch_neuronx.reset_metrics()


def test_counters_of_eager_ops_agree_with_the_snapshot():
    a = torch.randn(6, 7, device="neuron")
    for _ in range(3):
        torch.mul(a, a)
    names = met.counter_names()
    assert {"kernel.calls", "op_calls/aten::mul.Tensor"} <= set(names)
    assert met.counter_value("op_calls/aten::mul.Tensor") == 3
    snap = torch_neuronx.metrics()["kernels"]
    assert met.counter_value("kernel.calls") == snap["calls"]
    assert met.counter_value("kernel.misses") == snap["misses"]
    assert snap["per_op"]["aten::mul.Tensor"] == {
        "calls": 3, "signatures": met.counter_value("op_signatures/aten::mul.Tensor"),
        "misses": met.counter_value("op_misses/aten::mul.Tensor") or 0}
    assert met.counter_value("no.such.counter") is None


def test_every_counter_and_timer_says_what_kind_of_figure_it_is():
    a = torch.randn(512, 512, device="neuron")
    (a @ a).sum()
    fn = torch.compile(lambda x: x.cos() + 1, backend="neuron")
    fn(torch.randn(3, 4, device="neuron"))
    names = met.counter_names() + met.metric_names()
    assert {"kernel.calls", "compile.aot_graphs_compiled", "compile.compile_seconds",
            "host_pool.limit_bytes"} <= set(names)
    for name in names:
        assert met.describe(name).endswith(KINDS), name
    report = met.metrics_report()
    for name in names:
        assert f": {name}\n" in report


def test_clear_counters_zeroes_every_store_but_not_levels():
    a = torch.randn(512, 512, device="neuron")
    torch.neuron.empty_cache()
    for _ in range(3):
        (a @ a).sum()
    assert met.counter_value("host_pool.hits") > 0 and met.counter_value("kernel.calls") > 0
    limit = met.counter_value("host_pool.limit_bytes")
    met.clear_counters()
    assert met.counter_value("kernel.calls") == 0
    assert torch_neuronx.metrics()["kernels"]["calls"] == 0
    assert met.counter_value("host_pool.hits") == 0  # C++ keeps counting; the registry subtracts
    assert torch.neuron.memory_stats()["host_pool.hits"] == 0
    assert met.counter_value("host_pool.limit_bytes") == limit
    (a @ a).sum()
    assert met.counter_value("host_pool.hits") >= 1


def test_compile_timers_feed_the_dynamo_metrics():
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    fn = torch.compile(lambda x: torch.tanh(x) * 2, backend="neuron")
    x = torch.randn(5, 2, device="neuron")
    for _ in range(4):
        torch.testing.assert_close(fn(x).cpu(), torch.tanh(x.cpu()) * 2)
    total, seconds, samples = met.metric_data("compile.execution_seconds")
    dyn = torch_neuronx.get_dynamo_metrics()
    assert total == dyn["executions"] == 4 and len(samples) == 4
    assert seconds == pytest.approx(dyn["execution_seconds"])
    assert met.metric_data("compile.compile_seconds")[1] == pytest.approx(dyn["compile_seconds"])
    assert met.counter_value("compile.aot_graphs_compiled") == dyn["aot_graphs_compiled"] == 1
    met.clear_metrics()
    assert met.metric_data("compile.execution_seconds")[0] == 0
    assert "compile.execution_seconds" not in met.metric_names()
    assert torch_neuronx.get_dynamo_metrics()["executions"] == 0


def test_a_source_without_reset_is_cleared_by_baseline():
    store = {"demo.count": 5, "demo.level": 40}
    registry.register_source("test-demo", registry.Source(
        read=lambda: dict(store), describe=lambda n: registry.labelled(n, registry.HOST),
        gauges=frozenset({"demo.level"})))
    try:
        assert met.counter_value("demo.count") == 5
        met.clear_counters()
        assert met.counter_value("demo.count") == 0 and met.counter_value("demo.level") == 40
        store["demo.count"] += 2
        assert met.counter_value("demo.count") == 2
        assert "demo.count" in met.counter_names()
    finally:
        registry._sources.pop("test-demo")


def test_one_reset_clears_every_store():
    """Graph records, the collective log and eager lowering records live in the registry:
    after ``clear_counters()`` no figure outlives the records it counts, and ``reset()``
    leaves nothing at all (``get_dynamo_metrics()`` used to keep its graphs)."""
    from torch_neuronx import projection
    from torch_neuronx.compile import kernel_lowering

    torch._dynamo.reset()
    met.reset()
    was_lowering = kernel_lowering.eager_lowering_active()
    kernel_lowering.set_eager_lowering(True)
    try:
        torch.sin(torch.randn(3, 5, device="neuron"))
    finally:
        kernel_lowering.set_eager_lowering(was_lowering)
    fn = torch.compile(lambda x: x.cos() * 3, backend="neuron")
    fn(torch.randn(4, 2, device="neuron"))
    projection.COLLECTIVE_LOG.counts[projection.CollectiveRecord("all_reduce", 1024, 2, "chip")] += 1
    dyn = torch_neuronx.get_dynamo_metrics()
    assert dyn["graphs_compiled"] == 1 and dyn["aot_graphs_compiled"] == 1 and dyn["compiled_graphs"]
    assert torch_neuronx.metrics()["lowering"]["signatures"] > 0
    assert {"compile.graphs", "compile.compiled_graphs", "projection.collectives", "metrics.lowering"} \
        <= set(met.record_names())
    assert met.records("projection.collectives")[0]["calls"] == 1
    for name in met.record_names():
        assert met.describe(name).endswith(KINDS), name

    met.clear_counters()
    dyn = torch_neuronx.get_dynamo_metrics()
    assert dyn["graphs_compiled"] == dyn["aot_graphs_compiled"] == 0  # counts and records agree
    assert dyn["compiled_graphs"] == [] and dyn["graphs"] == [] and dyn["estimated_compile_seconds"] == 0
    assert met.records("compile.graphs") == [] and met.records("projection.collectives") == []
    assert torch_neuronx.metrics()["lowering"]["signatures"] == 0
    assert torch_neuronx.metrics()["kernels"]["calls"] == 0
    assert torch_neuronx.metrics()["projection"]["collectives"]["by_kind"] == {}
    assert met.metric_data("compile.compile_seconds")[0] > 0  # timers are metrics, not counters
    met.reset()
    assert met.metric_names() == []
    assert all(name.startswith("host_pool.") for name in met.counter_names())  # levels (gauges) only
    assert torch_neuronx.get_dynamo_metrics()["compile_seconds"] == 0
