"""Streams and events on ``neuron`` (kernels are synchronous on the host)."""
from __future__ import annotations

import time

import pytest
import torch

pytestmark = pytest.mark.fast


def test_streams_have_identities_and_contexts():
    default = torch.neuron.default_stream()
    assert torch.neuron.current_stream() == default
    s1, s2 = torch.neuron.Stream(), torch.neuron.Stream(priority=-1)
    assert s1 != s2 and s1.device == torch.device("neuron:0")
    with torch.neuron.stream(s1):
        assert torch.neuron.current_stream() == s1
        x = torch.ones(4, device="neuron") * 2
        with torch.neuron.stream(None):
            assert torch.neuron.current_stream() == s1
    assert torch.neuron.current_stream() == default
    assert s1.query()
    s1.synchronize()
    s2.wait_stream(s1)
    x.record_stream(s2)
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))


def test_stream_on_another_core():
    s = torch.neuron.Stream(device=2)
    assert s.device == torch.device("neuron:2")
    assert torch.neuron.current_stream(2) == torch.neuron.default_stream(2)
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream(2) == s
    assert torch.neuron.current_stream(2) == torch.neuron.default_stream(2)


def test_torch_stream_and_accelerator():
    s = torch.Stream(device="neuron")
    assert s.device == torch.device("neuron:0")
    with s:
        assert torch.accelerator.current_stream() == s
    assert torch.accelerator.current_stream() != s


def test_event_elapsed_time_measures_host_time():
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    torch.ones(100, device="neuron").sum()
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    ms = start.elapsed_time(end)
    assert 45 <= ms < 5000


def test_event_wait_and_stream_record():
    s = torch.neuron.Stream()
    ev = s.record_event()
    assert isinstance(ev, torch.Event)
    torch.neuron.current_stream().wait_event(ev)
    ev.wait()
    assert ev.query()


def test_neuron_stream_and_event_types():
    s, e = torch.neuron.Stream(), torch.neuron.Event()
    assert isinstance(s, torch.Stream) and isinstance(s, torch.neuron.Stream)
    assert isinstance(e, torch.Event) and isinstance(e, torch.neuron.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.neuron.Event)


def test_stream_context_restores_the_current_device():
    with torch.neuron.stream(torch.neuron.Stream(device=3)):
        assert torch.neuron.current_device() == 3
    assert torch.neuron.current_device() == 0
