"""Memory history and snapshots of the emulated cores in PyTorch's format, read back by
PyTorch's own memory visualiser (``torch.cuda._memory_viz``), as the real product's snapshots
open in "the PyTorch memory visualizer" (Neuron "How to profile memory usage in torch-neuronx")."""
from __future__ import annotations

import base64
import json
import pickle
import re
import threading

import pytest
import torch
from torch.cuda import _memory_viz

MiB = 2**20


@pytest.fixture
def history():
    """Records the history (Python stacks) for one test, then turns it off."""
    torch.neuron.memory._record_memory_history(stacks="python")
    try:
        yield
    finally:
        torch.neuron.memory._record_memory_history(None)


def _allocate_for_history():
    kept = torch.randn(300, 300, device="neuron:2")  # 360,000 bytes: a 384 KiB block
    freed = torch.empty(5 * MiB, dtype=torch.uint8, device="neuron:2")
    del freed
    return kept


def _embedded_snapshot(html: str) -> dict:
    """The snapshot an HTML page of ``_memory_viz`` carries (base64 of the pickle)."""
    files = json.loads(re.search(r"const local_files = (\[.*?\])\n", html).group(1))
    return pickle.loads(base64.b64decode(files[0]["base64"]))


def _check_consistent(snapshot: dict) -> None:
    """Segments tile into blocks and add up to the allocator's own figures, core by core."""
    for device in range(torch.neuron.device_count()):
        segments = [s for s in snapshot["segments"] if s["device"] == device]
        for seg in segments:
            assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
            assert seg["blocks"][0]["address"] == seg["address"]
            live = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
            assert seg["allocated_size"] == sum(b["size"] for b in live)
            assert seg["requested_size"] == sum(b["requested_size"] for b in live)
        assert sum(s["total_size"] for s in segments) == torch.neuron.memory_reserved(device)
        assert sum(s["allocated_size"] for s in segments) == torch.neuron.memory_allocated(device)


def test_snapshot_round_trips_through_pytorchs_memory_viz(history):
    kept = _allocate_for_history()
    snapshot = torch.neuron.memory._snapshot()
    _check_consistent(snapshot)
    assert len(snapshot["device_traces"]) == torch.neuron.device_count()
    events = snapshot["device_traces"][2]
    ours = [e for e in events if any(f["name"] == "_allocate_for_history" and f["filename"] == __file__
                                     for f in e["frames"])]
    assert [(e["action"], e["size"]) for e in ours] == [
        ("alloc", 384 * 1024), ("alloc", 5 * MiB), ("free_requested", 5 * MiB), ("free_completed", 5 * MiB)]
    assert events[-1]["action"] == "snapshot"
    block = next(b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == ours[0]["addr"])
    assert block["state"] == "active_allocated" and block["requested_size"] == kept.nbytes
    assert any(f["name"] == "_allocate_for_history" for f in block["frames"])
    # PyTorch's own readers: the text summaries and the two HTML pages, whose embedded
    # snapshot is this one.
    summary = _memory_viz.segsum(snapshot)
    assert f"segments: {len(snapshot['segments'])}" in summary
    replay = _memory_viz.trace(snapshot)  # the events replayed as code, one line each
    assert "Device 2 ----" in replay and "del " in replay and "5.0MiB" in replay
    for page in (_memory_viz.trace_plot(snapshot), _memory_viz.segment_plot(snapshot)):
        assert "MemoryViz.js" in page
        assert _embedded_snapshot(page) == snapshot


def test_dump_snapshot_writes_the_pickle_the_viewer_opens(history, tmp_path):
    kept = _allocate_for_history()
    path = tmp_path / "snap" / "neuron.pickle"
    torch.neuron.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        dumped = pickle.load(f)
    _check_consistent(dumped)
    assert any(e["action"] == "alloc" and e["size"] == 384 * 1024 for e in dumped["device_traces"][2])
    del kept


def test_snapshot_with_history_off_has_the_state_but_no_events():
    """As torch.cuda.memory._snapshot(): segments and blocks always, events and frames only
    while recording."""
    torch.neuron.memory._record_memory_history(None)
    kept = _allocate_for_history()
    snapshot = torch.neuron.memory._snapshot()
    _check_consistent(snapshot)
    assert snapshot["device_traces"] == [[] for _ in range(torch.neuron.device_count())]
    assert all(b["frames"] == [] for s in snapshot["segments"] for b in s["blocks"])
    assert torch.neuron.memory.memory_snapshot() == snapshot["segments"]
    del kept


def test_state_history_keeps_the_stacks_of_live_blocks_only():
    torch.neuron.memory._record_memory_history("state", stacks="python")
    try:
        kept = _allocate_for_history()
        snapshot = torch.neuron.memory._snapshot()
    finally:
        torch.neuron.memory._record_memory_history(None)
    assert snapshot["device_traces"][2] == []
    block = next(b for s in snapshot["segments"] if s["device"] == 2 for b in s["blocks"]
                 if b["state"] == "active_allocated" and b["requested_size"] == kept.nbytes)
    assert block["frames"][0]["name"] == "_allocate_for_history"


def test_max_entries_keeps_the_newest_events():
    torch.neuron.memory._record_memory_history(stacks="python", max_entries=3)
    try:
        x = torch.empty(100, device="neuron:2")
        y = torch.empty(200, device="neuron:2")
        del x
        events = torch.neuron.memory._snapshot()["device_traces"][2]
    finally:
        torch.neuron.memory._record_memory_history(None)
    # alloc x, alloc y, free_requested x, free_completed x, then the snapshot: the last three
    assert [(e["action"], e["size"]) for e in events] == [
        ("free_requested", 512), ("free_completed", 512), ("snapshot", 0)]
    del y


def test_history_from_several_threads_stays_paired(history):
    def work():
        for _ in range(50):
            t = torch.ones(64, 64, device="neuron:2")
            del t

    workers = [threading.Thread(target=work) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    snapshot = torch.neuron.memory._snapshot()
    _check_consistent(snapshot)
    actions = [e["action"] for e in snapshot["device_traces"][2] if e["size"] == 64 * 64 * 4]
    assert actions.count("alloc") == actions.count("free_completed") >= 150


@pytest.mark.parametrize("kwargs, message", [
    ({"enabled": "yes"}, "enabled must be one of"),
    ({"context": "stack"}, "context must be one of"),
    ({"stacks": "cpp"}, "stacks must be one of"),
    ({"max_entries": 0}, "max_entries must be an int >= 1"),
])
def test_bad_history_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        torch.neuron.memory._record_memory_history(**kwargs)


def test_unwritable_snapshot_path_is_a_clear_error_and_harms_nothing(history, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError, match=r"_dump_snapshot: '.*a-file/snap.pickle' cannot be created"):
        torch.neuron.memory._dump_snapshot(blocker / "snap.pickle")
    with pytest.raises(OSError, match="is an existing directory"):
        torch.neuron.memory._dump_snapshot(tmp_path)
    kept = _allocate_for_history()  # still recording, still allocating
    assert any(e["action"] == "alloc" for e in torch.neuron.memory._snapshot()["device_traces"][2])
    assert list(tmp_path.iterdir()) == [blocker]
    del kept


def test_memory_timeline_replays_the_events_to_the_figures_the_allocator_reports():
    """The offline figure's series (html_report/memory_figure.py) ends at the core's current
    figures and, replayed backwards from them, starts at the figures before the recording,
    however few events the history kept."""
    from torch_neuronx.html_report.figures import png
    from torch_neuronx.html_report.memory_figure import memory_series, memory_timeline

    before = (torch.neuron.memory_allocated(2), torch.neuron.memory_reserved(2))
    torch.neuron.memory._record_memory_history(stacks="python", max_entries=4)
    try:
        kept = [torch.empty(n * MiB, dtype=torch.uint8, device="neuron:2") for n in (1, 30, 2)]
        del kept[1]
        snapshot = torch.neuron.memory._snapshot()
    finally:
        torch.neuron.memory._record_memory_history(None)
    _, allocated, reserved = memory_series(snapshot, 2)
    assert (allocated[-1], reserved[-1]) == (torch.neuron.memory_allocated(2), torch.neuron.memory_reserved(2))
    # the newest four events: alloc 2 MiB, free_requested and free_completed 30 MiB, snapshot
    assert allocated == [allocated[-1] + 30 * MiB - 2 * MiB, allocated[-1] + 30 * MiB,
                         allocated[-1] + 30 * MiB, allocated[-1], allocated[-1]]
    assert all(r >= a for a, r in zip(allocated, reserved)) and reserved[0] >= before[1]
    assert len(png(memory_timeline(snapshot, 2, "neuron:2", capacity=64 * MiB))) > 1000
    del kept
