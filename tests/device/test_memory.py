"""Memory accounting of the emulated HBM and out-of-memory behaviour."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import torch

pytestmark = pytest.mark.fast

MiB = 2**20


def test_allocation_is_charged_to_its_core_and_released():
    dev = torch.device("neuron:1")
    torch.neuron.reset_peak_memory_stats(dev)
    base = torch.neuron.memory_allocated(dev)
    x = torch.empty(3 * MiB // 4, device=dev)  # 3 MiB of float32
    assert torch.neuron.memory_allocated(dev) - base == 3 * MiB
    assert torch.neuron.memory_reserved(dev) == torch.neuron.memory_allocated(dev)
    y = x + 1  # the fallback's adopted output is charged too
    assert torch.neuron.memory_allocated(dev) - base == 6 * MiB
    stats = torch.neuron.memory_stats(dev)
    for key in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        assert stats[f"{key}.all.current"] - base == 6 * MiB
        assert stats[f"{key}.all.peak"] >= stats[f"{key}.all.current"]
    del x, y
    assert torch.neuron.memory_allocated(dev) == base
    assert torch.neuron.max_memory_allocated(dev) - base == 6 * MiB
    torch.neuron.reset_peak_memory_stats(dev)
    assert torch.neuron.max_memory_allocated(dev) == base


def test_concurrent_threads_give_the_exact_peak_and_counts():
    """Charges and releases take no lock (runtime/AllocatorStats.cpp): four threads allocate
    and free on one core at once. At a barrier every thread holds all of its tensors, and no
    thread holds more at any other moment, so the peak is exactly their sum; afterwards the live
    bytes are back, and the cumulative counts of the finished threads are all there."""
    dev = torch.device("neuron:1")
    threads, held, churn = 4, 8, 200
    size = 64 * 64 * 4  # one float32 64x64 result: the small pool
    a = torch.ones(64, 64, device=dev)
    b = torch.ones(64, 64, device=dev)
    torch.neuron.reset_peak_memory_stats(dev)
    torch.neuron.reset_accumulated_memory_stats(dev)
    before = torch.neuron.memory_stats(dev)
    base, small, blocks = (before[f"{key}.current"] for key in (
        "allocated_bytes.all", "allocated_bytes.small_pool", "allocation.all"))
    barrier = threading.Barrier(threads)
    errors = []

    def work():
        try:
            for _ in range(churn):  # one result alive at a time
                c = a + b
                del c
            kept = [a * b for _ in range(held)]
            barrier.wait()
            del kept
            for _ in range(churn):
                c = a - b
                del c
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    stats = torch.neuron.memory_stats(dev)
    charges = threads * (held + 2 * churn)
    assert stats["allocated_bytes.all.peak"] == base + threads * held * size
    assert stats["allocated_bytes.small_pool.peak"] == small + threads * held * size
    assert stats["allocation.all.peak"] == blocks + threads * held
    assert stats["allocated_bytes.all.current"] == base
    assert stats["allocation.all.current"] == blocks
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == charges
    assert stats["allocated_bytes.all.allocated"] == stats["allocated_bytes.all.freed"] == charges * size
    assert stats["num_device_alloc"] == stats["num_device_free"] == charges


def test_views_and_cpu_aliases_cost_nothing():
    x = torch.randn(256, 256, device="neuron")
    base = torch.neuron.memory_allocated()
    v = x.t()[3:, ::2].unsqueeze(0)[..., :100]
    v.mul_(2)
    _ = x.cpu()  # a host copy is host memory, not device memory
    assert torch.neuron.memory_allocated() == base


def test_mem_get_info_and_summary():
    free, total = torch.neuron.mem_get_info(0)
    assert total == torch.neuron.get_device_properties(0).total_memory
    assert free == total - torch.neuron.memory_allocated(0)
    x = torch.empty(MiB, dtype=torch.uint8, device="neuron")
    assert torch.neuron.mem_get_info(0)[0] == free - MiB
    summary = torch.neuron.memory_summary(0)
    assert "neuron:0" in summary and "Allocated memory" in summary
    torch.neuron.empty_cache()
    assert torch.neuron.memory_allocated(0) == total - free + MiB
    del x


def test_torch_accelerator_memory_api_matches():
    dev = torch.device("neuron:2")
    x = torch.ones(1000, device=dev)
    assert torch.accelerator.memory_allocated(dev) == torch.neuron.memory_allocated(2)
    assert torch.accelerator.get_memory_info(dev) == torch.neuron.mem_get_info(2)
    del x


_OOM_SCRIPT = r"""
import torch, torch_neuronx
from torch_neuronx import _C
_C._configure_devices(2, 64 << 20)  # two cores of 64 MiB
MiB = 1 << 20
keep = torch.empty(40 * MiB, dtype=torch.uint8, device="neuron:0")
baseline = torch.neuron.memory_stats(0)
try:
    torch.empty(30 * MiB, dtype=torch.uint8, device="neuron:0")
except torch.OutOfMemoryError as e:
    print("MSG", str(e).splitlines()[0])
else:
    raise SystemExit("no OOM")
try:  # an op whose CPU kernel allocates, adopted afterwards
    keep.float()
except torch.OutOfMemoryError:
    print("OOM2")
after = torch.neuron.memory_stats(0)
for key in ("allocated_bytes.all.current", "reserved_bytes.all.current",
            "active_bytes.all.current", "allocation.all.current"):
    assert after[key] == baseline[key], (key, after[key], baseline[key])
print("OOMS", after["num_ooms"])
# the process stays usable: the other core is untouched, and freeing makes room
other = torch.empty(60 * MiB, dtype=torch.uint8, device="neuron:1")
del keep
again = torch.ones(30 * MiB, dtype=torch.uint8, device="neuron:0")
print("OK", int(again.sum()), torch.neuron.memory_allocated(0), other.numel())
"""


def test_out_of_memory_is_clear_and_recoverable():
    proc = subprocess.run([sys.executable, "-c", _OOM_SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = dict((line + " ").split(" ", 1) for line in proc.stdout.splitlines())
    msg = lines["MSG"]
    assert "neuron:0" in msg
    assert f"tried to allocate {30 * MiB} bytes" in msg
    assert f"{24 * MiB} bytes free of {64 * MiB} bytes capacity" in msg
    assert "OOM2" in lines
    assert lines["OOMS"].strip() == "2"
    assert lines["OK"].split() == [str(30 * MiB), str(30 * MiB), str(60 * MiB)]


def test_oom_is_torch_out_of_memory_error_subclass():
    # No small profile in-process: ask for more than the 24 GiB of one core.
    before = torch.neuron.memory_stats(3)
    with pytest.raises(torch.OutOfMemoryError, match="free of"):
        torch.empty(25 * 2**30, dtype=torch.uint8, device="neuron:3")
    after = torch.neuron.memory_stats(3)
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert after["num_ooms"] == before["num_ooms"] + 1


def test_storage_resize_for_fsdp2():
    x = torch.ones(1024, device="neuron")
    base = torch.neuron.memory_allocated()
    storage = x.untyped_storage()
    storage.resize_(0)
    assert torch.neuron.memory_allocated() == base - 4096
    storage.resize_(4096)
    assert torch.neuron.memory_allocated() == base
    x.fill_(3)
    assert x.cpu().eq(3).all()


def test_pin_memory_and_is_pinned():
    cpu = torch.randn(4, 4)
    pinned = cpu.pin_memory()
    assert torch.equal(pinned, cpu)
    assert pinned.is_pinned()
    assert not cpu.is_pinned()
    assert not torch.ones(2, device="neuron").is_pinned()
    moved = pinned.to("neuron", non_blocking=True)
    torch.testing.assert_close(moved.cpu(), cpu, rtol=0, atol=0)


def _pool():
    stats = torch.neuron.memory_stats()
    return {k: stats[f"host_pool.{k}"] for k in ("hits", "misses", "cached_bytes", "limit_bytes")}


def test_host_memory_of_large_results_is_reused_not_refaulted():
    a = torch.randn(512, 512, device="neuron")
    torch.neuron.empty_cache()
    for _ in range(2):  # warm: the first product and sum take fresh blocks
        (a @ a).sum()
    before = _pool()
    for _ in range(10):
        out = a @ a
        assert torch.equal(out.cpu(), a.cpu() @ a.cpu())
        del out
    after = _pool()
    assert after["misses"] == before["misses"]
    assert after["hits"] >= before["hits"] + 10
    # CPU work outside neuron ops keeps PyTorch's own allocator.
    b = torch.randn(512, 512)
    (b @ b).sum()
    assert _pool()["misses"] == after["misses"] and _pool()["hits"] == after["hits"]
    # The pool is host-side only: the emulated HBM accounting is unchanged.
    assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated()
    assert _pool()["cached_bytes"] > 0
    torch.neuron.empty_cache()
    assert _pool()["cached_bytes"] == 0


def test_host_memory_of_small_results_is_reused_from_the_threads_cache():
    """A freed small result's host block serves the next result of its size class (5,000 and
    5,120 bytes share one), where glibc would look elsewhere; the emulated HBM counts every
    byte as before."""
    a = torch.randn(1250, device="neuron")  # 5,000 bytes
    b = torch.randn(1280, device="neuron")  # 5,120 bytes
    base = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    x = a * 2
    fence = a * 3  # allocated after x: x's block is not the top of glibc's heap
    block = x.data_ptr()
    del x
    y = b * 2
    assert y.data_ptr() == block
    assert torch.equal(y.cpu(), b.cpu() * 2) and torch.equal(fence.cpu(), a.cpu() * 3)
    assert torch.neuron.memory_allocated() == base + 5000 + 5120
    assert torch.neuron.max_memory_allocated() == base + 5000 + 5120
    assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated()
    # A block freed on another thread joins that thread's cache; nothing is lost or counted twice.
    moved = [b * 4]
    thread = threading.Thread(target=moved.clear)
    thread.start()
    thread.join()
    assert torch.neuron.memory_allocated() == base + 5000 + 5120
    assert torch.equal((b * 4).cpu(), b.cpu() * 4)


def test_host_pool_limit_from_environment():
    code = (
        "import torch, torch_neuronx\n"
        "a = torch.randn(512, 512, device='neuron')\n"
        "for _ in range(3):\n"
        "    assert torch.equal((a @ a).cpu(), a.cpu() @ a.cpu())\n"
        "s = torch.neuron.memory_stats()\n"
        "print(s['host_pool.limit_bytes'], s['host_pool.cached_bytes'], s['host_pool.hits'])\n"
    )
    import os

    env = dict(os.environ, TORCHNEURON_HOST_POOL_MB="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["0", "0", "0"]
