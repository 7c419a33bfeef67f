"""Forked children (TR torch_neuronx/__init__.py:134-173; runtime/Fork.cpp).

The real product marks a child forked after its runtime was initialised from Python
(``torch.neuron.init()``, ``get_device_properties()``, ``init_process_group``) as in a
bad fork: initialising again raises "Cannot re-initialize Neuron runtime in forked
subprocess. …". The emulated device is host memory, so a child's tensors and ops keep
working and compute as on CPU. The scenarios run in fresh interpreters, since whether
the runtime was initialised from Python is process state.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

FORK_MESSAGE = ("Cannot re-initialize Neuron runtime in forked subprocess. "
                "To use Neuron with multiprocessing, use the 'spawn' start method")

# In the child: compute on the device, compare with CPU, try to initialise again.
_CHILD = """
import json, os, signal, torch

def child_report(x):
    out = {"bad_fork": torch.neuron._is_in_bad_fork()}
    y = torch.randn(5, 3)
    got = (x @ y.to("neuron")).relu().sum(dim=0).cpu()
    out["equal_cpu"] = torch.equal(got, (x.cpu() @ y).relu().sum(dim=0))
    out["inherited_intact"] = torch.equal(x.cpu(), X_CPU)
    torch.manual_seed(0)  # skips the neuron generators in a bad fork, as PyTorch does for CUDA
    for name, fn in (("init", torch.neuron.init), ("properties", torch.neuron.get_device_properties)):
        try:
            fn()
            out[name] = "ok"
        except RuntimeError as exc:
            out[name] = str(exc)
    return out

def in_child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        signal.alarm(60)  # a child that hangs (a lock held at the fork) fails instead of blocking
        try:
            data = json.dumps(fn()).encode()
        except BaseException as exc:
            data = json.dumps({"error": repr(exc)}).encode()
        os.write(w, data)
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return json.loads(b"".join(chunks))

torch.manual_seed(1)
X_CPU = torch.randn(4, 5)
x = X_CPU.to("neuron")
"""


def _run(body: str) -> dict:
    code = _CHILD + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def forked_before_and_after_init() -> dict:
    """One interpreter for two scenarios (a fresh one costs seconds): a child forked while the
    process had only used tensors, then, after ``torch.neuron.init()``, a child and a grandchild.
    The order matters: initialisation is process state that only ever moves forward."""
    return _run("""
        before_init = in_child(lambda: child_report(x))
        torch.neuron.init()
        parent_bad = torch.neuron._is_in_bad_fork()
        child = in_child(lambda: child_report(x))
        grandchild = in_child(lambda: in_child(lambda: child_report(x)))
        print(json.dumps({"before_init": before_init, "parent_bad": parent_bad, "child": child,
                          "grandchild": grandchild, "parent_init_after": torch.neuron.init() is None}))
    """)


def test_child_of_a_process_that_only_used_tensors_initialises_normally(forked_before_and_after_init):
    """Tensors and ops alone never run the real product's Python-level init, so its fork
    hook leaves the child alone (TR __init__.py:164-170: only ``_initialized`` children)."""
    assert forked_before_and_after_init["before_init"] == {
        "bad_fork": False, "equal_cpu": True, "inherited_intact": True, "init": "ok", "properties": "ok"}


def test_child_forked_after_init_refuses_to_initialise_but_computes(forked_before_and_after_init):
    out = forked_before_and_after_init
    assert out["parent_bad"] is False and out["parent_init_after"] is True
    for who in ("child", "grandchild"):  # a bad fork is inherited
        assert out[who] == {"bad_fork": True, "equal_cpu": True, "inherited_intact": True,
                            "init": FORK_MESSAGE, "properties": FORK_MESSAGE}, who


def test_child_memory_stats_are_its_own_and_a_lock_held_at_fork_is_released():
    """A forked child keeps the parent's tensors (current usage) but its own peak; a
    generator lease another thread holds at the fork (runtime/Fork.h) does not hang it."""
    out = _run("""
        import threading
        big = torch.empty(1 << 22, device="neuron")
        del big                                     # the parent's peak is above its current usage
        gen = torch.neuron.default_generators()[0]
        stop = threading.Event()
        def draw():                                 # holds gen's lock for most of its time
            while not stop.is_set():
                torch.randn(1 << 20, device="neuron", generator=gen)
        thread = threading.Thread(target=draw, daemon=True)  # a failed child must not keep the parent alive
        thread.start()
        def child():
            t = torch.randn(8, device="neuron", generator=gen)   # hangs if the lock stayed held
            return {"allocated": torch.neuron.memory_allocated(), "peak": torch.neuron.max_memory_allocated(),
                    "finite": bool(torch.isfinite(t.cpu()).all())}
        import time
        results = []
        for _ in range(5):
            time.sleep(0.05)
            results.append(in_child(child))
        stop.set()
        thread.join()
        print(json.dumps({"children": results, "parent_peak": torch.neuron.max_memory_allocated()}))
    """)
    assert out["parent_peak"] >= (1 << 22) * 4
    for child in out["children"]:
        assert child["finite"] is True
        assert child["allocated"] <= child["peak"] < (1 << 22) * 4 <= out["parent_peak"]
