"""torch.compile(backend="neuron"): results against eager CPU, static-shape rules, metrics, fallback."""
from __future__ import annotations

import importlib.metadata
import logging
import threading

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config
from torch import nn
from torch.utils._pytree import tree_leaves as pytree_leaves

import torch_neuronx

# Seconds of cold compiles needing nothing from other tests: in a child pytest on the background lane.
pytestmark = [pytest.mark.fast, pytest.mark.child_process, pytest.mark.usefixtures("fresh_dynamo")]


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))


def test_backend_registered_by_name_and_entry_point():
    (entry,) = [e for e in importlib.metadata.entry_points(group="torch_dynamo_backends") if e.name == "neuron"]
    assert entry.value == "torch_neuronx.compile.backend:neuron_backend"
    assert "neuron" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend
    from torch._dynamo.device_interface import get_interface_for_device
    from torch_neuronx.compile.backend import neuron_backend

    assert lookup_backend("neuron") is neuron_backend
    interface = get_interface_for_device("neuron")
    assert interface.device_count() == torch.neuron.device_count()
    assert interface.current_device() == torch.neuron.current_device()
    assert interface.get_device_properties(0).name == torch.neuron.get_device_properties(0).name


def test_training_forward_backward_matches_cpu():
    torch.manual_seed(0)
    cpu_model = _mlp()
    model = _mlp().to("neuron")
    model.load_state_dict(cpu_model.state_dict())
    x_cpu = torch.randn(8, 16)
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    out = compiled(x_cpu.to("neuron"))
    assert out.device.type == "neuron"
    ref = cpu_model(x_cpu)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    (out**2).sum().backward()
    (ref**2).sum().backward()
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        assert p.grad.device.type == "neuron"
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["graphs_compiled"] == 1
    assert metrics["aot_graphs_compiled"] == 2  # forward and backward, compiled separately
    assert metrics["cache_hits"] + metrics["cache_misses"] == 2
    assert metrics["compile_seconds"] > 0 and metrics["execution_seconds"] > 0
    assert metrics["executions"] == 2


def test_input_mutation_and_returned_view_alias_the_input():
    def fn(x, buf):
        x.add_(1)
        buf.mul_(2)
        return x[1:], x.sum()

    x = torch.randn(4, 3, device="neuron")
    buf = torch.randn(5, device="neuron")
    x_ref, buf_ref = x.cpu(), buf.cpu()
    view, total = torch.compile(fn, backend="neuron")(x, buf)
    view_ref, total_ref = fn(x_ref, buf_ref)
    torch.testing.assert_close(x.cpu(), x_ref)
    torch.testing.assert_close(buf.cpu(), buf_ref)
    torch.testing.assert_close(total.cpu(), total_ref)
    assert view._base is x and view.data_ptr() == x[1:].data_ptr()
    view.zero_()
    assert (x[1:] == 0).all()


def test_index_put_written_in_place_only_where_the_caller_mutates():
    """Our index_put is a scatter that Inductor now writes in place (compile/scatter_reinplace.py):
    into an input only when the program mutates it, never into one it only reads."""
    def functional(x, i, v):
        return x.index_put((i,), v), x * 2

    def in_place(x, i, v):
        x.index_put_((i,), v, accumulate=True)
        return x.sum(0)

    x, i, v = torch.randn(8, 4), torch.tensor([1, 5, 1]), torch.randn(3, 4)
    for fn in (functional, in_place):
        torch._dynamo.reset()
        x_ref, x_dev = x.clone(), x.to("neuron")
        want = fn(x_ref, i, v)
        got = torch.compile(fn, backend="neuron")(x_dev, i.to("neuron"), v.to("neuron"))
        for a, b in zip(pytree_leaves(got), pytree_leaves(want), strict=True):
            torch.testing.assert_close(a.cpu(), b)
        torch.testing.assert_close(x_dev.cpu(), x_ref)  # unchanged by `functional`, accumulated by `in_place`
    assert not torch.equal(x_ref, x)


class _CacheStep(nn.Module):
    """A decode step's shape: parameters and a cache written in place at a position."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(6, 8))

    def forward(self, x, position):
        self.cache.index_copy_(0, position, self.proj(x))
        return self.cache.sum(0), self.cache.view(torch.int32)


def test_warm_graph_reuses_input_aliases_and_sees_inputs_mutated_or_reallocated():
    """Parameters and the cache are the same tensors every call: their CPU aliases are built
    once. Memory changed in place is seen through them; a position that now holds
    other memory (``.data =`` , ``set_``, a freed and reallocated tensor) gets a fresh alias."""
    from torch_neuronx.compile.aliased_execution import input_alias_counts

    torch.manual_seed(0)
    ref = _CacheStep()
    model = _CacheStep()
    model.load_state_dict(ref.state_dict())
    model.to("neuron")
    step = torch.compile(model, backend="neuron", fullgraph=True)

    def check(i: int) -> None:
        x = torch.randn(1, 8)
        position = torch.tensor([i % 6])
        with torch.no_grad():
            total, bits = step(x.to("neuron"), position.to("neuron"))
            total_ref, bits_ref = ref(x, position)
        torch.testing.assert_close(total.cpu(), total_ref)
        torch.testing.assert_close(model.cache.cpu(), ref.cache)
        assert torch.equal(bits.cpu(), bits_ref)
        assert bits.device.type == "neuron" and bits.data_ptr() == model.cache.data_ptr()

    check(0)  # compiles
    input_alias_counts(reset=True)
    check(1)
    check(2)
    # Inputs: weight, bias and cache (reused), x and position (new tensors every call).
    assert input_alias_counts() == {"built": 2 * 2, "reused": 2 * 3}

    with torch.no_grad():
        model.proj.weight.mul_(2)  # in place: same memory, the cached alias sees it
        ref.proj.weight.mul_(2)
    input_alias_counts(reset=True)
    check(3)
    assert input_alias_counts()["built"] == 2
    new_weight = torch.randn(8, 8)
    model.proj.weight.data = new_weight.to("neuron")  # reallocated: a fresh alias
    ref.proj.weight.data = new_weight.clone()
    check(4)
    model.cache.set_(torch.zeros(6, 8, device="neuron"))  # the cache too
    ref.cache.zero_()
    check(5)
    counts = input_alias_counts()
    assert counts["built"] == 2 + 3 + 3
    assert torch_neuronx.get_dynamo_metrics()["recompilations"] == 0


def test_device_factories_and_cpu_outputs_in_graph():
    def fn(x):
        idx = torch.arange(x.shape[0], device=x.device)
        return x * idx[:, None], x.cpu()

    x = torch.randn(4, 3, device="neuron")
    scaled, on_cpu = torch.compile(fn, backend="neuron", fullgraph=True)(x)
    assert scaled.device.type == "neuron" and on_cpu.device.type == "cpu"
    torch.testing.assert_close(scaled.cpu(), x.cpu() * torch.arange(4)[:, None])
    on_cpu.add_(100)  # a CPU result is a copy: device memory is untouched
    assert (x.cpu() < 100).all()


def test_each_new_shape_compiles_a_static_graph_and_is_counted():
    def fn(x):
        return (x * 2).relu().sum(-1)

    compiled = torch.compile(fn, backend="neuron")
    for n in (4, 5, 6):
        x = torch.randn(n, 8, device="neuron")
        torch.testing.assert_close(compiled(x).cpu(), fn(x.cpu()))
    metrics = torch_neuronx.get_dynamo_metrics()
    # Three graphs, none symbolic (automatic dynamic shapes would have made the third one so).
    assert metrics["graphs_compiled"] == 3
    assert metrics["recompilations"] == 2
    reasons = [r["reason"] for r in metrics["recompile_reasons"]]
    assert all("size mismatch at index 0" in r for r in reasons), reasons
    assert [g["inputs"] for g in metrics["graphs"]] == [[f"({n}, 8) torch.float32 neuron:0"] for n in (4, 5, 6)]


def test_dynamic_shapes_are_rejected_with_the_product_message():
    x = torch.randn(4, 8, device="neuron")
    # The DynamicShapeAnalysis message (TR neuron_dynamo_backend/fx/passes/dynamic_shape_analysis.py:59-118).
    with pytest.raises(Exception, match=r"Dynamic shapes detected in the model, but torch-neuronx requires static "
                                        r"shapes. Found \d dynamic dimension\(s\): \[s\d+"):
        torch.compile(torch.sin, backend="neuron", dynamic=True)(x)
    torch._dynamo.reset()
    y = torch.randn(6, 8, device="neuron")
    torch._dynamo.mark_dynamic(y, 0)
    with pytest.raises(Exception, match="dynamic=True is not supported"):
        torch.compile(torch.cos, backend="neuron")(y)
    assert torch_neuronx.get_dynamo_metrics()["graphs_compiled"] == 0


def test_mode_other_than_default_logs_the_real_warning_and_compiles(neuron_log):
    # TR neuron_dynamo_backend/backend.py:289-293: a warning on each backend call, compilation continues.
    x = torch.randn(4, 8, device="neuron")
    out = torch.compile(torch.tanh, backend="neuron", mode="max-autotune")(x)
    torch.testing.assert_close(out.cpu(), torch.tanh(x.cpu()))
    assert [r.getMessage() for r in neuron_log if r.levelno == logging.WARNING] == [
        "Neuron backend does not support mode='max-autotune', falling back to default mode."
    ]


def test_cpu_inputs_are_copied_to_the_device_unless_disabled(monkeypatch):
    # TR neuron_dynamo_backend/executor.py:95-112: CPU inputs are auto-copied; the switch makes them an error.
    def fn(x):
        return (x * 2).relu()

    monkeypatch.delenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", raising=False)
    x = torch.randn(4, 8)
    out = torch.compile(fn, backend="neuron")(x)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), fn(x))
    assert torch_neuronx.get_dynamo_metrics()["compiled_graphs"][0]["lowering"] == "lowered"
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    with pytest.raises(RuntimeError, match=r"Input tensor at index 0 is on cpu device, expected neuron"):
        torch.compile(fn, backend="neuron")(torch.randn(4, 8))


def test_graph_breaks_are_counted_with_reasons():
    def fn(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    x = torch.randn(4, device="neuron")
    torch.testing.assert_close(torch.compile(fn, backend="neuron")(x).cpu(), x.cpu().sin().cos())
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["graphs_compiled"] == 2
    assert metrics["graph_breaks"] == 1
    assert "graph_break" in metrics["graph_break_reasons"][0]["reason"]


def _unique_graph(x):
    return x * 3.14159 - 2.71828


def test_compile_failure_raises_by_default_and_falls_back_when_allowed(monkeypatch):
    x = torch.randn(4, device="neuron")
    broken_compiler = {"cpp.cxx": ("/nonexistent/c++",), "fx_graph_cache": False}
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    with inductor_config.patch(broken_compiler), pytest.raises(Exception, match="NEFFCompilationError.*C\\+\\+ compiler"):
        torch.compile(_unique_graph, backend="neuron")(x)
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    with inductor_config.patch(broken_compiler):
        out = torch.compile(_unique_graph, backend="neuron")(x)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), _unique_graph(x.cpu()))
    fallbacks = torch_neuronx.get_dynamo_metrics()["fallbacks"]
    assert len(fallbacks) == 1 and "C++ compiler" in fallbacks[0]


def test_inductor_backend_on_neuron_tensors_compiles_with_the_neuron_backend():
    """torch.compile's default backend hands neuron graphs to the neuron backend
    (compile/inductor_device.py): a neuron graph record, CPU's result, a neuron result."""
    torch_neuronx.reset_dynamo_metrics()
    x = torch.randn(4, device="neuron")
    out = torch.compile(torch.exp, backend="inductor")(x)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), torch.exp(x.cpu()))
    assert torch_neuronx.get_dynamo_metrics()["graphs_compiled"] == 1
    from torch_neuronx.compile.inductor_device import MESSAGE, UnsupportedNeuronCodegen

    with pytest.raises(NotImplementedError, match="backend='neuron'"):
        UnsupportedNeuronCodegen.create()  # Inductor's own code generators still refuse neuron
    assert "Inductor's code generators cannot target neuron tensors" in MESSAGE


def test_metrics_api_on_both_modules_and_reset():
    assert torch.neuron.get_dynamo_metrics is torch_neuronx.get_dynamo_metrics
    assert torch.neuron.reset_dynamo_metrics is torch_neuronx.reset_dynamo_metrics
    x = torch.randn(3, device="neuron")
    torch.compile(torch.sigmoid, backend="neuron")(x)
    assert torch_neuronx.get_dynamo_metrics()["graphs_compiled"] == 1
    torch_neuronx.reset_dynamo_metrics()
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["graphs_compiled"] == metrics["aot_graphs_compiled"] == metrics["executions"] == 0
    assert metrics["compile_seconds"] == metrics["execution_seconds"] == 0.0


def test_disable_cache_env_turns_compile_cache_off(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    x = torch.randn(3, device="neuron")
    torch.testing.assert_close(torch.compile(torch.erf, backend="neuron")(x).cpu(), torch.erf(x.cpu()))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["aot_graphs_compiled"] == 1
    assert metrics["cache_hits"] == metrics["cache_misses"] == 0


def test_autocast_region_inside_the_graph_matches_eager():
    def fn(a, b):
        with torch.autocast("neuron", dtype=torch.bfloat16):
            return (a @ b).relu()

    a, b = torch.randn(8, 8, device="neuron"), torch.randn(8, 8, device="neuron")
    out = torch.compile(fn, backend="neuron", fullgraph=True)(a, b)
    assert out.dtype == torch.bfloat16 and out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), fn(a, b).cpu())


@pytest.mark.slow  # a cold convolution forward and backward: the full suite's, not the edit-test loop's
def test_a_saved_activation_with_strides_a_view_cannot_take_compiles_projected_and_matches_cpu(caplog):
    """Inductor lays a convolution's output out channels-last; AOTAutograd hands the backward graph
    that saved activation with those strides, not the traced ones, and the graph's ``view`` of it
    cannot apply: views become reshapes before the projection and the host's fake propagation."""
    g = torch.Generator().manual_seed(0)
    x, w, s = torch.randn(2, 4, 6, 6, generator=g), torch.randn(8, 4, 3, 3, generator=g), torch.randn(288, generator=g)

    def scaled(x, w, s):
        return (nn.functional.conv2d(x, w, padding=1).view(2, -1) * s).sin().sum()

    s_dev = s.to("neuron").requires_grad_()
    with caplog.at_level(logging.WARNING):
        torch.compile(scaled, backend="neuron", fullgraph=True)(x.to("neuron"), w.to("neuron"), s_dev).backward()
    s_cpu = s.clone().requires_grad_()
    scaled(x, w, s_cpu).backward()
    torch.testing.assert_close(s_dev.grad.cpu(), s_cpu.grad)
    assert not [r.message for r in caplog.records if "not projected" in r.message]
    assert [r["lowering"] for r in torch_neuronx.get_dynamo_metrics()["compiled_graphs"]] == ["lowered", "lowered"]


def test_our_inductor_changes_are_held_by_one_compile_at_a_time():
    """Each compile saves Inductor's CPU pass and restores it after (compile/backend.py): two
    overlapping in different threads would nest their changes and restore each other's."""
    from torch._inductor.codegen import common

    from torch_neuronx.compile import backend, scatter_reinplace, tile2d_atomic_add

    common.init_backend_registration()
    before = (common.device_codegens["cpu"], common.custom_backend_passes.get("cpu"))
    first_inside, second_inside = threading.Event(), threading.Event()
    seen = {}

    def first():
        with backend._our_inductor():
            first_inside.set()
            seen["overlapped"] = second_inside.wait(timeout=0.5)

    def second():
        first_inside.wait(timeout=5)
        with backend._our_inductor():
            second_inside.set()
            seen["pass"] = common.custom_backend_passes["cpu"].uuid()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen["overlapped"] is False
    original = before[1].uuid() if before[1] is not None else None
    assert seen["pass"] == (scatter_reinplace.REINPLACE_ID, (tile2d_atomic_add.FIX_ID, original))
    assert (common.device_codegens["cpu"], common.custom_backend_passes.get("cpu")) == before
