"""Thread safety: allocator, stats, RNG and the thread-local current device
(Transformers loads checkpoint shards from a thread pool), and the autograd engine's
worker threads at exit."""
from __future__ import annotations

import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

import children


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


def test_settling_the_autograd_workers_waits_for_the_backward_queued_before():
    """What the exit handler relies on (neuron/autograd_workers.py): ``settle`` returns only once
    the device's autograd worker has finished the work queued before it, here a backward held
    inside its node until the test lets it go."""
    from torch_neuronx.neuron import autograd_workers

    entered, release = threading.Event(), threading.Event()

    class Held(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, grad):  # on the device's worker thread
            entered.set()
            release.wait(60)
            return grad * 2

    x = torch.ones(3, device="neuron", requires_grad=True)
    loss = Held.apply(x).sum()
    backward = threading.Thread(target=loss.backward)
    backward.start()
    try:
        assert entered.wait(60), "the backward never reached the worker"
        settled = threading.Thread(target=autograd_workers.settle, args=([0],))
        settled.start()
        settled.join(0.5)
        waited = settled.is_alive()
    finally:
        release.set()
    settled.join(60)
    backward.join(60)
    assert waited and not settled.is_alive()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 2.0))


# A training step's backward, then exit at once: the device's autograd worker dropped the step's
# graph task (holding Python objects) while Python finalized and the process aborted with
# "terminate called without an active exception" (134) in about one run in four under load.
BACKWARD_THEN_EXIT = textwrap.dedent("""
    import sys, torch, torch_neuronx
    from torch_neuronx.neuron.autograd_workers import engine_workers_started
    before = engine_workers_started()
    model = torch.nn.Linear(8, 8).to("neuron")
    model(torch.rand(4, 8, device="neuron")).pow(2).sum().backward()
    print("workers started:", before, engine_workers_started())
    sys.exit(7)
""")


def _backward_then_exit_runs(folder, environ) -> list:
    """Four fresh interpreters, two at a time: the race is not forced, each run is a chance."""
    (folder / "backward.py").write_text(BACKWARD_THEN_EXIT)
    script = folder / "backward.py"
    return [done for _ in range(2) for done in children.run_together([script, script], environ, folder)]


backward_then_exit_runs = children.lane_fixture("backward_then_exit_runs", _backward_then_exit_runs,
                                                folder_prefix="torchneuron-backward-exit-")


def test_a_script_exiting_right_after_a_backward_returns_its_own_code(backward_then_exit_runs):
    for done in backward_then_exit_runs:
        assert "workers started: False True" in done.stdout, done.stderr[-2000:]
        assert done.returncode == 7 and "terminate called" not in done.stderr, done.stderr[-2000:]
