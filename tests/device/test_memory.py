"""Memory of the emulated HBM: the caching segment allocator the real product documents
(Neuron "Guidelines for memory management", torch-neuronx 2.14: a small pool below 1 MB,
size classes below 16 MB with a 256-byte minimum, segments kept until ``empty_cache``,
reserved >= allocated >= active), its statistics, and out-of-memory behaviour. The spacing of
the classes and the segment sizes, which the page does not give, follow PyTorch's CUDA
allocator (csrc/runtime/AllocatorSizes.h). Expected figures are derived by hand from those rules.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import children
from torch_neuronx.neuron.memory import block_bytes, layout_bytes, segment_bytes

pytestmark = pytest.mark.fast

MiB = 2**20


@pytest.mark.parametrize("nbytes, block", [
    (1, 256), (256, 256), (257, 512),  # the 256-byte minimum, then 256-byte steps to 1 KiB
    (1000, 1024), (1025, 1280),  # four classes per doubling from 1 KiB: (1 KiB, 2 KiB] by 256
    (5000, 5120), (360_000, 384 * 1024),  # (256 KiB, 512 KiB] by 64 KiB
    (MiB - 1, MiB), (3 * MiB + 1, 3 * MiB + MiB // 2),  # (2 MiB, 4 MiB] by 512 KiB
    (9 * MiB, 10 * MiB), (16 * MiB - 1, 16 * MiB),  # (8 MiB, 16 MiB] by 2 MiB
    (16 * MiB, 16 * MiB), (16 * MiB + 1, 16 * MiB + 1), (17 * MiB + 3, 17 * MiB + 3),  # not rounded
])
def test_block_bytes_follow_the_documented_size_classes(nbytes, block):
    assert block_bytes(nbytes) == block


@pytest.mark.parametrize("nbytes, segment", [
    (1, 2 * MiB), (MiB - 1, 2 * MiB),  # the small pool's 2 MiB segments
    (MiB, 20 * MiB), (8 * MiB, 20 * MiB),  # blocks under 10 MiB share 20 MiB segments
    (9 * MiB, 10 * MiB), (17 * MiB + 3, 17 * MiB + 3),  # larger ones get their own
])
def test_segment_bytes(nbytes, segment):
    assert segment_bytes(nbytes) == segment


def test_rounding_functions_refuse_bad_sizes():
    assert block_bytes(0) == 0
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        block_bytes(-1)
    with pytest.raises(ValueError, match="nbytes must be > 0"):
        segment_bytes(0)
    with pytest.raises(TypeError):
        block_bytes(1.5)


def test_allocation_is_charged_to_its_core_and_released():
    dev = torch.device("neuron:1")
    torch.neuron.reset_peak_memory_stats(dev)
    base = torch.neuron.memory_allocated(dev)
    requested = torch.neuron.memory_stats(dev).get("requested_bytes.all.current", 0)  # {} before first use
    x = torch.empty(3 * MiB // 4, device=dev)  # 3 MiB of float32: a class of its own
    assert torch.neuron.memory_allocated(dev) - base == 3 * MiB
    y = x[:1000] + 1  # the fast path's adopted result is charged its block: 4,000 -> 4,096 bytes
    assert torch.neuron.memory_allocated(dev) - base == 3 * MiB + 4096
    stats = torch.neuron.memory_stats(dev)
    assert stats["requested_bytes.all.current"] - requested == 3 * MiB + 4000
    assert stats["active_bytes.all.current"] == stats["allocated_bytes.all.current"]
    assert stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"]
    for key in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        assert stats[f"{key}.all.peak"] >= stats[f"{key}.all.current"]
    del x, y
    assert torch.neuron.memory_allocated(dev) == base
    assert torch.neuron.max_memory_allocated(dev) - base == 3 * MiB + 4096
    assert torch.neuron.memory_reserved(dev) >= 3 * MiB  # freed blocks stay cached
    torch.neuron.reset_peak_memory_stats(dev)
    assert torch.neuron.max_memory_allocated(dev) == base


def test_concurrent_threads_give_the_exact_peak_and_counts():
    """Four threads allocate and free on one core at once (each core's segments are guarded by
    its lock: runtime/AllocatorPools.h). At a barrier every thread holds all of its tensors,
    and no thread holds more at any other moment, so the peak is exactly their sum; afterwards
    the live bytes are back, every block is in a segment, and the cumulative counts of the
    finished threads are all there."""
    dev = torch.device("neuron:1")
    threads, held, churn = 4, 8, 200
    size = 64 * 64 * 4  # one float32 64x64 result: the small pool, a class of its own
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
    assert stats["requested_bytes.all.current"] == before["requested_bytes.all.current"]
    segments = [s for s in torch.neuron.memory.memory_snapshot() if s["device"] == 1]
    assert sum(s["total_size"] for s in segments) == stats["reserved_bytes.all.current"]
    assert sum(s["allocated_size"] for s in segments) == stats["allocated_bytes.all.current"]
    assert all(sum(b["size"] for b in s["blocks"]) == s["total_size"] for s in segments)


def test_views_and_cpu_aliases_cost_nothing():
    x = torch.randn(256, 256, device="neuron")
    base = torch.neuron.memory_allocated()
    v = x.t()[3:, ::2].unsqueeze(0)[..., :100]
    v.mul_(2)
    _ = x.cpu()  # a host copy is host memory, not device memory
    assert torch.neuron.memory_allocated() == base


def test_mem_get_info_and_summary():
    """Free memory is what new segments may take: capacity minus reserved, as the device says."""
    free, total = torch.neuron.mem_get_info(0)
    assert total == torch.neuron.get_device_properties(0).total_memory
    assert free == total - torch.neuron.memory_reserved(0)
    x = torch.empty(MiB, dtype=torch.uint8, device="neuron")
    assert torch.neuron.mem_get_info(0)[0] == total - torch.neuron.memory_reserved(0)
    summary = torch.neuron.memory_summary(0)
    for row in ("neuron:0", "Allocated memory", "Reserved memory", "Non-releasable memory", "Segments"):
        assert row in summary
    del x


def test_torch_accelerator_memory_api_matches():
    dev = torch.device("neuron:2")
    x = torch.ones(1000, device=dev)
    assert torch.accelerator.memory_allocated(dev) == torch.neuron.memory_allocated(2)
    assert torch.accelerator.get_memory_info(dev) == torch.neuron.mem_get_info(2)
    del x


def _run_scenario(environ: dict) -> dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("allocator_scenario.py"))],
                          capture_output=True, text=True, timeout=300, env=environ)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# One fresh process with two 64 MiB cores (tests/device/allocator_scenario.py), on the background lane.
scenario = children.lane_fixture("scenario", _run_scenario)


def test_known_sequence_reserves_what_the_documented_rounding_gives(scenario):
    small, large, reused, unrounded = (scenario[k] for k in ("small", "large", "reused", "unrounded"))
    # 1,000 bytes: a 1,024-byte block in a new 2 MiB small-pool segment
    assert (small["allocated_bytes"], small["requested_bytes"], small["reserved_bytes"]) == (1024, 1000, 2 * MiB)
    assert small["inactive_split_bytes"] == 2 * MiB - 1024  # the rest of the segment, cached
    # 3 MiB + 1: a 3.5 MiB block in a new 20 MiB large-pool segment
    assert large["allocated_bytes"] == 1024 + 3.5 * MiB
    assert large["reserved_bytes"] == 22 * MiB and large["segment"] == 2
    # 9 MiB: a 10 MiB block cut from the 16.5 MiB left in that segment: nothing new reserved
    assert reused["allocated_bytes"] == 1024 + 13.5 * MiB
    assert reused["reserved_bytes"] == 22 * MiB and reused["num_device_alloc"] == 2
    assert reused["inactive_split_bytes"] == 2 * MiB - 1024 + 6.5 * MiB
    # 17 MiB + 3: 16 MiB and more is not rounded; a segment of exactly that size
    assert unrounded["allocated_bytes"] == 1024 + 13.5 * MiB + 17 * MiB + 3
    assert unrounded["reserved_bytes"] == 39 * MiB + 3 and unrounded["segment"] == 3
    assert unrounded["free"] == 64 * MiB - unrounded["reserved_bytes"]
    for step in (small, large, reused, unrounded):
        assert step["reserved_bytes"] >= step["allocated_bytes"] >= step["requested_bytes"]
        assert step["active_bytes"] == step["allocated_bytes"]


def test_fragmentation_appears_and_empty_cache_releases_it(scenario):
    fragmented = scenario["fragmented"]
    # The 3.5 MiB block freed between free space and a live block cannot be returned.
    assert fragmented["reserved_bytes"] == 39 * MiB + 3
    assert fragmented["allocated_bytes"] == 1024 + 10 * MiB + 17 * MiB + 3
    assert fragmented["inactive_split_bytes"] == 2 * MiB - 1024 + 3.5 * MiB + 6.5 * MiB
    # 30 MiB would fit next to the live tensors (27 MiB of 64), not next to the segments.
    assert "tried to allocate 31457280 bytes" in scenario["fragmented_oom"]
    assert f"{64 * MiB - (39 * MiB + 3)} bytes free" in scenario["fragmented_oom"]
    # Once a segment is unused, the next allocation that needs room releases it (one retry).
    room = scenario["released_for_room"]
    assert room["reserved_bytes"] == 2 * MiB + 17 * MiB + 3 + 30 * MiB
    assert (room["num_alloc_retries"], room["num_device_free"], room["num_ooms"]) == (2, 1, 1)
    freed, emptied = scenario["all_freed"], scenario["emptied"]
    assert freed["allocated_bytes"] == 0 and freed["reserved_bytes"] == room["reserved_bytes"]
    assert emptied["reserved_bytes"] == emptied["segment"] == 0 and emptied["free"] == 64 * MiB
    assert emptied["num_device_alloc"] == emptied["num_device_free"] == 4


def test_layout_bytes_is_what_a_fresh_core_holds(scenario):
    """A memory plan's question (these tensors allocated in order, none freed) is answered by
    the code every core runs, on a core of its own: the known sequence's first four tensors
    give what the live core held, the hand figures above; no device core is touched."""
    unrounded = scenario["unrounded"]
    reserved = torch.neuron.memory_stats(0).get("reserved_bytes.all.current", 0)
    sizes = [1000, 3 * MiB + 1, 9 * MiB, 17 * MiB + 3]
    assert layout_bytes(sizes) == (unrounded["allocated_bytes"], unrounded["reserved_bytes"])
    assert layout_bytes(sizes) == (1024 + 13.5 * MiB + 17 * MiB + 3, 39 * MiB + 3)
    assert layout_bytes([0, 1000, 0]) == (1024, 2 * MiB) and layout_bytes([]) == (0, 0)
    assert layout_bytes([MiB // 2] * 5) == (5 * MiB // 2, 2 * 2 * MiB)  # four per small segment
    assert torch.neuron.memory_stats(0).get("reserved_bytes.all.current", 0) == reserved
    with pytest.raises(ValueError, match="sizes must be >= 0 bytes, got -1"):
        layout_bytes([5, -1])


def test_out_of_memory_names_request_allocated_reserved_and_free(scenario):
    msg = scenario["oom_message"]
    assert msg.startswith("Neuron out of memory on neuron:0 (emulated HBM): tried to allocate "
                          f"{30 * MiB} bytes")
    assert f"{24 * MiB} bytes free of {64 * MiB} bytes capacity" in msg
    assert f"{40 * MiB} bytes reserved in segments, {40 * MiB} bytes allocated to tensors" in msg
    assert scenario["oom_adopted"]  # a CPU kernel's result that does not fit, too
    before, after = scenario["oom_before"], scenario["oom_after"]
    for key in ("allocated_bytes", "reserved_bytes", "requested_bytes", "allocation", "segment"):
        assert after[key] == before[key], key  # a failure charges nothing
    assert after["num_ooms"] == 2
    assert scenario["oom_events"] == [{"size": 30 * MiB, "device_free": 24 * MiB},
                                      {"size": 160 * MiB, "device_free": 24 * MiB}]
    # The process stays usable: the other core took 60 MiB, and core 0's freed 40 MiB
    # segment holds the next 30 MiB (its 10 MiB rest stays cached).
    total, recovered, other = scenario["recovered"]
    assert (total, other) == (30 * MiB, 60 * MiB)
    assert recovered["allocated_bytes"] == 30 * MiB and recovered["reserved_large_pool"] == 40 * MiB


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
    before, allocated = _pool(), torch.neuron.memory_allocated()
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
    assert torch.neuron.memory_allocated() == allocated
    assert _pool()["cached_bytes"] > 0
    torch.neuron.empty_cache()
    assert _pool()["cached_bytes"] == 0


def test_host_memory_of_small_results_is_reused_from_the_threads_cache():
    """A freed small result's host block serves the next result of its size class (5,000 and
    5,120 bytes share one), where glibc would look elsewhere; the emulated HBM charges each
    result its 5,120-byte block, as before."""
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
    assert torch.neuron.memory_allocated() == base + 2 * 5120
    assert torch.neuron.max_memory_allocated() == base + 2 * 5120
    # A block freed on another thread joins that thread's cache; nothing is lost or counted twice.
    moved = [b * 4]
    thread = threading.Thread(target=moved.clear)
    thread.start()
    thread.join()
    assert torch.neuron.memory_allocated() == base + 2 * 5120
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
