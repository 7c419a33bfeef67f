"""The ``projection`` section of ``torch_neuronx.metrics()``: fed by the eager
signature listener and the ``neuron`` compile backend, reset with the rest."""
import pytest
import torch

import torch_neuronx
from torch_neuronx import _C, projection
from torch_neuronx.debug import metrics as debug_metrics
from torch_neuronx.projection.recording import ProjectionMode

pytestmark = pytest.mark.fast


@pytest.fixture
def accounting():
    was = torch_neuronx.kernel_accounting_enabled()
    torch_neuronx.set_kernel_accounting(True)
    torch_neuronx.reset_metrics()
    yield
    torch_neuronx.set_kernel_accounting(was)
    torch_neuronx.reset_metrics()


def _training_step(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32, device=device)
    return model, opt, x


def _step(model, opt, x):
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()


def test_training_step_is_projected_labelled_and_reset(accounting):
    model, opt, x = _training_step("neuron")
    torch_neuronx.reset_metrics()
    _step(model, opt, x)
    p = torch_neuronx.metrics()["projection"]
    eager = p["eager"]
    assert p["label"] == eager["label"] == p["graphs"]["label"] == p["collectives"]["label"] == "projected"
    assert eager["device_seconds"] > 0 and eager["flops"] > 0 and 0 < eager["mfu"] < 1
    assert eager["launch_overhead_seconds"] > 0
    assert eager["device_seconds"] == pytest.approx(sum(eager["by_engine"].values())
                                                    + eager["launch_overhead_seconds"])
    assert eager["kernel_seconds"] == pytest.approx(eager["compute_bound_seconds"] + eager["memory_bound_seconds"])
    assert {"aten::mm", "aten::addmm"} <= set(eager["by_op"])
    assert p["unprojected_calls"] == 0
    # the section covers every call the accounting counted
    assert sum(r["calls"] for r in eager["by_op"].values()) == sum(_C._signature_calls().values())

    torch_neuronx.reset_metrics()
    after = torch_neuronx.metrics()["projection"]
    assert after["eager"]["device_seconds"] == 0 and after["eager"]["by_op"] == {}
    assert after["graphs"]["graphs"] == {}


def test_section_equals_the_projectors_own_sum_for_the_same_calls(accounting):
    model, opt, x = _training_step("neuron")
    _step(model, opt, x)  # warm: optimizer state exists in both runs below
    torch_neuronx.reset_metrics()
    _step(model, opt, x)
    _step(model, opt, x)
    eager = torch_neuronx.metrics()["projection"]["eager"]

    device = projection.get_projector().device  # the process's target, whatever the environment says now
    reference = projection.Projector(device.instance, device.lnc)
    cpu_model, cpu_opt, cpu_x = _training_step("cpu")
    _step(cpu_model, cpu_opt, cpu_x)
    with ProjectionMode(reference) as mode:
        _step(cpu_model, cpu_opt, cpu_x)
        _step(cpu_model, cpu_opt, cpu_x)
    expected = reference.summary(mode.calls)
    assert eager["flops"] == expected["flops"]
    for op in ("aten::mm", "aten::addmm"):
        assert eager["by_op"][op]["kernel_seconds"] == pytest.approx(expected["by_op"][op]["kernel_seconds"])
        assert eager["by_op"][op]["calls"] == expected["by_op"][op]["calls"]


def test_a_signature_is_projected_once_when_read_never_inside_the_run(accounting, monkeypatch):
    projector = projection.get_projector()
    added = []
    original = projector.add_signature
    monkeypatch.setattr(projector, "add_signature", lambda op, key, args: added.append(key) or original(op, key, args))
    a = torch.randn(8, 8, device="neuron")
    torch_neuronx.metrics()
    added.clear()
    for _ in range(5):
        a @ a
    assert added == []  # queued by the listener, projected only when a projection is read
    eager = torch_neuronx.metrics()["projection"]["eager"]
    torch_neuronx.metrics()
    assert len(added) == 1
    assert _C._signature_calls()[added[0]] == 5 == eager["by_op"]["aten::mm"]["calls"]


def test_compiled_graph_is_projected_once_and_its_runs_counted(accounting, monkeypatch):
    projector = projection.get_projector()
    graphs = []
    original = projector.add_graph
    monkeypatch.setattr(projector, "add_graph",
                        lambda name, gm, inputs: graphs.append(name) or original(name, gm, inputs))
    torch._dynamo.reset()
    model = torch.nn.Linear(16, 16).to("neuron")
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(4, 16, device="neuron")
    with torch.no_grad():
        compiled(x)
        torch_neuronx.reset_metrics()
        for _ in range(3):
            compiled(x)
    assert len(graphs) == 1
    section = torch_neuronx.metrics()["projection"]["graphs"]
    (name,) = section["graphs"]
    row = section["graphs"][name]
    assert name == graphs[0] and row["executions"] == 3
    assert row["flops"] == 3 * 2 * 4 * 16 * 16
    assert section["device_seconds"] == pytest.approx(3 * projector.graphs[name].seconds
                                                      + row["launch_seconds"])
    assert debug_metrics.counter_value(f"graph_runs/{name}") == 3
    debug_metrics.clear_counters()
    assert torch_neuronx.metrics()["projection"]["graphs"]["graphs"] == {}


def test_reconfigure_projects_for_the_new_target(accounting, monkeypatch):
    before = torch.neuron.topology()
    monkeypatch.setenv("TORCHNEURON_INSTANCE", before.profile.name)  # reconfigure exports it; restored after
    capacity = torch.neuron.get_device_properties(0).total_memory
    try:
        torch_neuronx.reconfigure(instance="trn1.2xlarge")
        a = torch.randn(16, 16, device="neuron")
        a @ a
        p = torch_neuronx.metrics()["projection"]
        assert (p["device"]["instance"], p["device"]["lnc"]) == ("trn1.2xlarge", 1)
        assert p["eager"]["by_op"]["aten::mm"]["calls"] == 1 and p["unprojected_calls"] == 0
    finally:
        torch.neuron._configure(before, capacity)
        torch_neuronx.accounting.reconfigure(before)
    assert projection.get_projector().device.instance == before.profile.name
