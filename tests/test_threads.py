"""Thread safety: allocator, stats, RNG and the thread-local current device
(Transformers loads checkpoint shards from a thread pool)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch


def test_threads_creating_and_copying_tensors():
    before = [torch.neuron.memory_allocated(i) for i in range(4)]
    torch.manual_seed(0)
    sources = [torch.randn(64, 33) for _ in range(16)]

    def work(i):
        src = sources[i]
        device = f"neuron:{i % 4}"
        kept = []
        for _ in range(20):
            t = src.to(device)
            u = (t.t() * 2).contiguous().to(f"neuron:{(i + 1) % 4}")
            kept.append(u)
            kept = kept[-3:]
        return u.cpu()

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, range(16)))
    for src, res in zip(sources, results):
        assert torch.equal(res, (src.t() * 2))
    # every allocation from the threads was charged and then released
    assert [torch.neuron.memory_allocated(i) for i in range(4)] == before


def test_current_device_is_thread_local():
    barrier = threading.Barrier(4, timeout=60)  # a failing thread must not hang the run
    seen = {}

    def work(index):
        torch.neuron.set_device(index)
        barrier.wait()  # all threads have set their device before anyone reads
        t = torch.empty(3, device="neuron")
        seen[index] = (torch.neuron.current_device(), t.device.index)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert seen == {i: (i, i) for i in range(4)}
    assert torch.neuron.current_device() == 0  # the main thread is untouched


def test_new_threads_start_on_the_default_device():
    torch.neuron.set_device(2)
    try:
        result = []
        th = threading.Thread(target=lambda: result.append(torch.neuron.current_device()))
        th.start()
        th.join()
        assert result == [0]
    finally:
        torch.neuron.set_device(0)


def test_parallel_random_streams_are_consistent():
    # Each thread uses its own core's generator; results must equal a serial run.
    def draw(i):
        g = torch.Generator(device=f"neuron:{i}")
        g.manual_seed(i)
        return torch.randn(1000, device=f"neuron:{i}", generator=g).cpu()

    serial = [draw(i) for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(draw, range(4)))
    for a, b in zip(serial, parallel):
        assert torch.equal(a, b)
