"""``torch.profiler`` on ``neuron``: device events on the projected timeline (docs/profiling.md).

The real product profiles with PyTorch's own API, ``ProfilerActivity.CPU`` and
``ProfilerActivity.PrivateUse1`` with a ``NeuronConfig`` (DOCS, "Capture PyTorch profiles with
Neuron Explorer"); here the device events are projections. The compiled step is
``test_profiler_compiled.py``'s.
"""
from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler
from torch.profiler._trace_validator import validate_trace

import children
from profiler_checks import check_profile, profile_step
from torch_neuronx.accounting import projected
from torch_neuronx.coverage.probe import token_batch
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode, capture, last_timeline
from torch_neuronx.profiling.config import parse_cores
from torch_neuronx.runtime.errors import UsageError
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm


@pytest.fixture(scope="module")
def llama_step():
    """One AdamW step of the coverage sweep's one-layer Llama on ``neuron``, its gradients
    all-reduced over a one-rank ``neuron`` group as DDP does; warmed up once."""
    model = tiny_causal_lm("llama", TinySize(layers=1), attn_implementation="eager").train().to("neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = token_batch(model).to("neuron")
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()

    step()
    yield step
    dist.destroy_process_group()


def test_training_step_has_one_projected_device_event_per_kernel_and_collective(llama_step, tmp_path):
    seen = profile_step(llama_step, tmp_path)
    check_profile(seen, graphs_expected=False)
    assert seen["reference"]["collectives"] == 12  # one all-reduce per parameter of the one-layer Llama
    passed, violations = validate_trace(str(seen["path"]))  # PyTorch's own trace validator
    assert passed, violations
    # where Neuron Explorer looks for the framework trace
    assert seen["path"].name == "trace.json" and seen["path"].parent.parent.name.endswith(f"_pid_{os.getpid()}")


def test_the_device_waits_for_the_host_and_the_host_for_nothing():
    """A kernel issued while the device is busy starts when it is free; an idle device
    starts a kernel when it is issued."""
    from torch_neuronx import projection
    from torch_neuronx.profiling.timeline import Note, place

    x = torch.randn(64, 64, device="neuron")
    torch.mm(x, x)  # its signature
    projected.project_pending()
    projection_key = next(k for k, c in projection.get_projector().kernels.items()
                          if c.op == "aten::mm" and c.flops == 2 * 64**3)
    cost = projection.get_projector().kernels[projection_key]
    launch = projection.get_projector().launch_seconds(cost)
    busy_ns = (launch + cost.seconds) * 1e9
    t0 = 1_796_000_000_000_000_000  # Unix ns, where a float would round to 256 ns
    notes = [Note(0, 0, int(projection_key, 16), 1, t0, 7), Note(0, 0, int(projection_key, 16), 2, t0 + 1_000, 7),
             Note(0, 0, int(projection_key, 16), 3, t0 + 10**9, 7)]
    timeline = place(notes, projection.get_projector(), [ProfileMode.DEVICE, ProfileMode.RUNTIME])
    assert timeline.origin_ns == t0
    starts = [e.start_ns for e in timeline.device_events()]
    assert starts == [0, busy_ns, 10**9]
    assert [e.args["queued_us"] for e in timeline.device_events()] == [0, (busy_ns - 1_000) / 1e3, 0]
    engines = [e for e in timeline.events if e.kind == "engine"]
    assert [e.track for e in engines] == ["TensorE"] * 3 and engines[0].start_ns == launch * 1e9


def test_profiling_only_the_cpu_records_no_device_work():
    x = torch.ones(8, device="neuron")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x + x).sum()
    assert not torch.neuron.is_available() or all(e.device_type == torch.autograd.DeviceType.CPU
                                                  for e in prof.events())
    assert not torch_neuronx_recording()


def torch_neuronx_recording() -> bool:
    from torch_neuronx.runtime.extension import _C

    return _C._device_trace_recording()


def test_modes_choose_the_tracks_and_the_cores_recorded():
    x = torch.ones(8, device="neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=NeuronConfig(modes=["device"])) as prof:
        x + x
    kinds = {e.kind for e in last_timeline().events}
    assert kinds == {"device", "engine"}  # no host launches without RUNTIME
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=NeuronConfig(modes=[ProfileMode.RUNTIME], capture_enabled_for_nc="1-3")):
        x + x  # on core 0, which is not captured
    assert last_timeline().events == []
    assert len([e for e in prof.events() if e.name == "aten::add.Tensor (projected)"]) == 1
    assert parse_cores("0,1,2-5") == (0, 1, 2, 3, 4, 5) and parse_cores(None) is None


def test_max_events_per_nc_keeps_the_newest():
    x = torch.ones(8, device="neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=NeuronConfig(max_events_per_nc=2)):
        for _ in range(5):
            x = x + 1
    events = last_timeline().device_events()
    assert len(events) == 2 and all(e.correlation > 0 for e in events)


def test_bad_configurations_are_one_line_each_and_lose_nothing(tmp_path):
    with pytest.raises(UsageError, match=r"unknown profile mode 'GPU'; the modes are ProfileMode.DEVICE, "):
        NeuronConfig(modes=["GPU"])
    with pytest.raises(UsageError, match=r"capture_enabled_for_nc='2-1' is not"):
        NeuronConfig(capture_enabled_for_nc="2-1")
    with pytest.raises(UsageError, match=r"max_events_per_nc=0 must be an integer >= 1"):
        NeuronConfig(max_events_per_nc=0)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UsageError, match=r"profile_output_dir='.*a-file/out' cannot be created: .* is a file"):
        NeuronConfig(profile_output_dir=blocker / "out")
    # an export that fails later costs the trace, not the run: one warning, None
    config = NeuronConfig(profile_output_dir=tmp_path / "out")
    exporter = NeuronProfiler(config)
    exporter.output_dir = blocker
    x = torch.ones(4, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=config,
                     on_trace_ready=lambda p: caught.append(exporter.export_trace(p))):
            y = x * 2
    assert caught[-1] is None and "the trace was not written" in str(caught[0].message)
    torch.testing.assert_close(y.cpu(), torch.full((4,), 2.0))


def test_tensorboard_handler_writes_the_device_timeline(tmp_path):
    x = torch.ones(8, device="neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path), worker_name="w")):
        x * 3
    (written,) = tmp_path.glob("w.*.pt.trace.json")
    events = json.loads(written.read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("cat") == "kernel"] == ["aten::mul.Tensor (projected)"]


def test_step_pictures_show_what_the_timeline_holds(tmp_path):
    """The pictures a report shows of one steady step, from the step's exported trace."""
    from torch_neuronx import projection
    from torch_neuronx.profiling.pictures import step_pictures

    w = torch.randn(32, 32, device="neuron")

    def step():
        torch.softmax(w @ w, dim=-1).sum()

    step()
    drawn = step_pictures(step, tmp_path)
    timeline, summary = last_timeline(), drawn["summary"]
    assert summary["label"] == "projected" and summary["events"] == len(timeline.device_events()) == 3  # mm, softmax, sum
    assert summary["device_seconds"] == pytest.approx(timeline.device_seconds(), abs=1e-9 * summary["events"])
    engines = [e for e in timeline.events if e.kind == "engine"]
    for name, busy in summary["engine_busy_seconds"].items():
        # the summary reads the exported trace, whose spans start and end on whole nanoseconds
        own = [e.seconds for e in engines if e.name == name]
        assert busy == pytest.approx(sum(own), abs=3e-9 * max(len(own), 1))
    assert summary["flops"] == 2 * 32**3
    assert summary["mfu"] == projection.get_projector().mfu(2 * 32**3, summary["device_seconds"])
    assert [t["name"] for t in summary["top"]][0] in {e.name for e in timeline.device_events()}
    spans = [e for e in json.loads(open(drawn["trace"]).read())["traceEvents"] if e.get("ph") == "X"]
    kernels = {(e["ts"] - min(s["ts"] for s in spans)) / 1e3: e["dur"] for e in spans if e.get("cat") == "kernel"}
    begin, end = drawn["busiest_window_ms"]  # starts at a kernel; holds at least the longest one's time
    assert end - begin == pytest.approx(1.0) and min(abs(begin - at) for at in kernels) < 1e-6
    assert sum(us for at, us in kernels.items() if begin <= at < end) >= max(kernels.values())
    for png in (drawn["timeline_png"], drawn["busiest_png"], drawn["summary_png"]):
        assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_overhead_tool_pairs_cpu_and_device_profiles():
    from tools.profiling_overhead import markdown, measure

    result = measure(pairs=1, layers=1)
    assert [len(result["seconds"][k]) for k in ("none", "cpu", "device")] == [1, 1, 1]
    assert result["events"]["device"] > result["events"]["cpu"]  # the device events are there
    assert "CPU + device over CPU only: wall **" in markdown(result)


# --- without code changes: NEURON_RT_INSPECT_ENABLE ------------------------------------------------

_CAPTURED = """
import torch
y = torch.ones(4, 4, device="neuron")
print((y @ y).repeat(1, 2).sum().item())
"""


_PROFILED_TOO = """
import torch
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU]):
    torch.ones(4, device="neuron") * 2
"""


def _inspect_runs(folder, environ):
    """A script run unchanged with the runtime's capture on: into a folder, and into one that
    cannot be written."""
    blocker = folder / "a-file"
    blocker.write_text("")
    runs = {}
    for name, out, script in (("written", folder / "output", _CAPTURED),
                              ("unwritable", blocker / "output", _CAPTURED),
                              ("profiled in the code too", folder / "nested", _PROFILED_TOO)):
        env = {**environ, "NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_DEVICE_PROFILE": "1",
               "NEURON_RT_INSPECT_OUTPUT_DIR": str(out)}
        runs[name] = children.start(["-c", script], env=env)
    return {name: children.finished(proc) for name, proc in runs.items()} | {"folder": folder}


inspect_runs = children.lane_fixture("inspect_runs", _inspect_runs, folder_prefix="torchneuron-inspect-")


def test_environment_capture_writes_the_trace_without_code_changes(inspect_runs):
    run = inspect_runs["written"]
    assert run.returncode == 0, run.stderr
    (trace,) = (inspect_runs["folder"] / "output").glob("*_pid_*/*/trace.json")
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert {e["name"] for e in kernels} >= {"aten::mm (projected)", "aten::sum (projected)"}, kernels
    assert run.stdout.strip() == "128.0"
    assert any(e.get("cat") == "gpu_user_annotation" for e in events)  # DEVICE_PROFILE=1: engine tracks


def test_environment_capture_into_an_unwritable_folder_warns_and_runs(inspect_runs):
    run = inspect_runs["unwritable"]
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if "NEURON_RT_INSPECT_ENABLE" in line]
    assert len(lines) == 1 and "profiling is off for this run" in lines[0] and "is a file" in lines[0], run.stderr


def test_environment_capture_ended_by_a_profiler_in_the_code_warns_and_exits_cleanly(inspect_runs):
    """PyTorch runs one profiler at a time: the program's own ended the capture's."""
    run = inspect_runs["profiled in the code too"]
    assert run.returncode == 0, run.stderr
    assert "no trace written: a torch.profiler in the program ended the capture" in run.stderr


def test_capture_is_off_unless_asked(monkeypatch):
    monkeypatch.delenv("NEURON_RT_INSPECT_ENABLE", raising=False)
    assert capture.start_from_environment() is False and capture.stop() is None
