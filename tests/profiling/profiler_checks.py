"""What a profile of one training step must show, for the eager and the compiled test alike.

``profile_step(step)`` runs ``step`` under ``torch.profiler`` with CPU and device activity
and a ``NeuronConfig``, and returns what the projection says of the same window (the
reference) beside what PyTorch read back from the profile and its exported trace.
"""
from __future__ import annotations

import json

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from torch_neuronx import projection
from torch_neuronx.accounting import projected
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler
from torch_neuronx.profiling.timeline import ENGINE_TRACKS

ENGINE_NAMES = set(ENGINE_TRACKS.values())


def _window_reference(before_calls: dict, before_runs: dict, before_collectives: dict) -> dict:
    """The projection of the kernels, graphs and collectives run since the counts given."""
    window = projected.since((before_calls, before_runs))
    projector = projection.get_projector()
    calls = torch_neuronx_calls()
    kernels = sum(n - before_calls.get(k, 0) for k, n in calls.items()
                  if k in projector.kernels and projector.kernels[k].engine != "none")
    collectives = {r: n - before_collectives.get(r, 0) for r, n in projection.COLLECTIVE_LOG.counts.items()
                   if n > before_collectives.get(r, 0)}
    comm = projector.collectives_summary(collectives)
    graph_runs = sum(n - before_runs.get(g, 0) for g, n in projected.graph_runs().items())
    return {"seconds": window.step.seconds + comm["seconds"], "kernels": kernels, "graphs": graph_runs,
            "collectives": sum(collectives.values()), "unprojected": sum(
                n - before_calls.get(k, 0) for k, n in calls.items() if k not in projector.kernels)}


def torch_neuronx_calls() -> dict:
    from torch_neuronx.runtime.extension import _C

    return _C._signature_calls()


def profile_step(step, tmp_path) -> dict:
    """Profile ``step()`` (warm: its kernels and graphs already met) and gather both sides."""
    projected.project_pending()
    before = (torch_neuronx_calls(), projected.graph_runs(), dict(projection.COLLECTIVE_LOG.counts))
    config = NeuronConfig(profile_output_dir=tmp_path / "profiles")
    exporter = NeuronProfiler(config)
    written = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=config,
                 on_trace_ready=lambda p: written.append(exporter.export_trace(p))) as prof:
        step()
    reference = _window_reference(*before)
    events = prof.events()
    device = [e for e in events if e.device_type == DeviceType.PrivateUse1 and not e.is_user_annotation]
    with open(written[0]) as f:
        trace = json.load(f)
    return {"reference": reference, "prof": prof, "device": device, "trace": trace, "path": written[0],
            "engines": [e for e in events if e.device_type == DeviceType.PrivateUse1 and e.is_user_annotation]}


def check_profile(seen: dict, graphs_expected: bool) -> None:
    """The properties every device profile of a step must have."""
    ref, device, trace = seen["reference"], seen["device"], seen["trace"]
    assert ref["unprojected"] == 0, ref
    graphs = [e for e in device if e.name.startswith("graph ")]
    collectives = [e for e in device if e.name.split(" ")[0] in ("all_reduce", "broadcast", "all_gather")]
    kernels = [e for e in device if e not in graphs and e not in collectives]
    # one device event per kernel, graph and collective the metrics count
    assert (len(kernels), len(graphs), len(collectives)) == (ref["kernels"], ref["graphs"], ref["collectives"])
    assert (len(graphs) > 0) == graphs_expected
    # their durations add up to the projection's step time (each event rounded to the ns)
    total_us = sum(e.time_range.elapsed_us() for e in device)
    assert abs(total_us - ref["seconds"] * 1e6) <= 1e-3 * len(device), (total_us, ref["seconds"] * 1e6)
    # each is linked to the CPU op that issued it: key_averages' device column holds them all
    table = seen["prof"].key_averages()
    cpu_device_us = sum(e.self_device_time_total for e in table if e.device_type == DeviceType.CPU)
    assert abs(cpu_device_us - total_us) <= 1e-3 * len(device), (cpu_device_us, total_us)
    assert "Self NEURON" in table.table(row_limit=5)
    # the device is asynchronous: one unit at a time, each after it was issued
    starts = sorted((e.time_range.start, e.time_range.end) for e in kernels + graphs)
    assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(starts, starts[1:]))
    # the exported trace: a device process with engine tracks, every event labelled a projection
    tracks = {e["args"]["name"] for e in trace["traceEvents"]
              if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == device[0].device_index}
    assert ENGINE_NAMES <= tracks, tracks
    kernel_events = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernel_events) == len(device)
    assert all(e["args"]["label"] == "projected" and e["name"].endswith("(projected)") for e in kernel_events)
    assert all(e["args"]["projection"]["queued_us"] >= 0 for e in kernel_events)
    flows = {(e["ph"], e["id"]) for e in trace["traceEvents"] if e.get("cat") == "ac2g"}
    assert {i for ph, i in flows if ph == "s"} == {i for ph, i in flows if ph == "f"}
    assert len(flows) == 2 * len(device)
    assert {e.name for e in seen["engines"]} <= ENGINE_NAMES and seen["engines"]
