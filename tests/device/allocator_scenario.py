"""Known allocation sequences on a fresh process with two 64 MiB cores, for test_memory.py.

Run as a script (``python tests/device/allocator_scenario.py``): prints one JSON object of what each
step left in the allocator, which the tests compare with figures derived by hand from the
documented rounding (``csrc/runtime/AllocatorSizes.h``). A fresh process, because the figures
are absolute: a core another test used could lend its cached blocks.
"""
from __future__ import annotations

import json

import torch

import torch_neuronx  # noqa: F401  (registers the device)
from torch_neuronx import _C

MiB = 1 << 20


def figures(core: int) -> dict[str, int]:
    stats = torch.neuron.memory_stats(core)
    keys = ("allocated_bytes", "reserved_bytes", "requested_bytes", "active_bytes",
            "inactive_split_bytes", "segment", "allocation")
    out = {key: stats[f"{key}.all.current"] for key in keys}
    out.update({key: stats[key] for key in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                                            "num_device_free")})
    out["reserved_large_pool"] = stats["reserved_bytes.large_pool.current"]
    out["free"] = torch.neuron.mem_get_info(core)[0]
    return out


def empty(nbytes: int, core: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device=f"neuron:{core}")


def oom_message(nbytes: int, core: int) -> str | None:
    try:
        empty(nbytes, core)
    except torch.OutOfMemoryError as exc:
        return str(exc).splitlines()[0]
    return None


def known_sequence(steps: dict) -> None:
    """Core 1: pools, rounding, reuse, fragmentation, the release of unused segments."""
    x = empty(1000, 1)  # small pool: a 1,024-byte block in a new 2 MiB segment
    steps["small"] = figures(1)
    y = empty(3 * MiB + 1, 1)  # large pool: 3.5 MiB in a new 20 MiB segment
    steps["large"] = figures(1)
    z = empty(9 * MiB, 1)  # a 10 MiB block, cut from the 16.5 MiB left of that segment
    steps["reused"] = figures(1)
    w = empty(17 * MiB + 3, 1)  # 16 MiB and more: not rounded, a segment of its own
    steps["unrounded"] = figures(1)
    del y
    torch.neuron.empty_cache()  # y's block sits between free space and z: nothing to release
    steps["fragmented"] = figures(1)
    steps["fragmented_oom"] = oom_message(30 * MiB, 1)
    del z  # its segment is now unused; the next request releases it to make room
    kept = empty(30 * MiB, 1)
    steps["released_for_room"] = figures(1)
    del kept, w, x
    steps["all_freed"] = figures(1)
    torch.neuron.empty_cache()
    steps["emptied"] = figures(1)


def out_of_memory(steps: dict) -> None:
    """Core 0: the error's figures, nothing charged by a failure, the process usable after."""
    torch.neuron.memory._record_memory_history(stacks="python")
    keep = empty(40 * MiB, 0)
    before = figures(0)
    steps["oom_message"] = oom_message(30 * MiB, 0)
    try:  # an op whose CPU kernel allocates, adopted afterwards
        keep.float()
    except torch.OutOfMemoryError:
        steps["oom_adopted"] = True
    steps["oom_before"], steps["oom_after"] = before, figures(0)
    events = torch.neuron.memory._snapshot()["device_traces"][0]
    steps["oom_events"] = [{k: e[k] for k in ("size", "device_free")} for e in events if e["action"] == "oom"]
    torch.neuron.memory._record_memory_history(None)
    other = empty(60 * MiB, 1)
    del keep
    again = torch.ones(30 * MiB, dtype=torch.uint8, device="neuron:0")
    steps["recovered"] = [int(again.sum()), figures(0), other.numel()]


def main() -> None:
    _C._configure_devices(2, 64 * MiB)
    steps: dict = {}
    known_sequence(steps)
    out_of_memory(steps)
    print(json.dumps(steps))


if __name__ == "__main__":
    main()
