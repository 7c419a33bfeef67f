"""Dynamo never traces the Python that the C++ extension calls back into.

The accounting calls ``accounting._on_new_signature`` (and through it every signature listener)
from C++ for each eager kernel signature new to the process. An eager op can run while Dynamo's
frame hook is active: the instruction a compiled function breaks its graph on runs eagerly in
the transformed frame (``.item()``, ``nonzero``, a call Dynamo cannot trace). Each frame the C++
starts then is a new frame to Dynamo, which compiled the callback once per op name until its
recompile limit (seen with Qwen4-exp's static-cache ``generate``).
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import torch_neuronx
from torch_neuronx import accounting

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _codes_dynamo_was_given() -> set[tuple[str, str]]:
    """(file, function) of every frame Dynamo's frame hook tried to compile since the last reset."""
    from torch._dynamo.convert_frame import input_codes

    return {(code.co_filename, code.co_name) for code in (ref() for ref in input_codes.seen) if code is not None}


@pytest.fixture
def seen_ops():
    ops: list[str] = []

    def listener(op, key, args):
        ops.append(op)

    accounting.add_signature_listener(listener)
    torch_neuronx.clear_op_tracking()  # every signature is new again: the callback runs for each
    yield ops
    accounting.remove_signature_listener(listener)


def _breaks_on_eager_ops(x):
    return torch.nonzero(x * 3 + 1 > 2)  # data-dependent shape: a graph break, nonzero runs eagerly


def test_eager_ops_inside_a_compiled_function_reach_the_listener_and_dynamo_traces_no_callback(seen_ops):
    x = torch.arange(-5.0, 7.0).reshape(3, 4)
    compiled = torch.compile(_breaks_on_eager_ops, backend="neuron")
    got = compiled(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), _breaks_on_eager_ops(x))
    # The eager ops between the graphs ran on the device and were reported to the listener.
    assert "aten::nonzero" in seen_ops
    traced = _codes_dynamo_was_given()
    ours = sorted(name for path, name in traced if "torch_neuronx" in path or name == "listener")
    assert ours == [], f"Dynamo traced Python called back from C++: {ours}"
    assert any(name == "_breaks_on_eager_ops" for _, name in traced)  # the hook was active


def test_the_callback_stays_untraced_after_a_dynamo_reset(seen_ops):
    x = torch.arange(-5.0, 7.0).reshape(3, 4).to("neuron")
    torch.compile(_breaks_on_eager_ops, backend="neuron")(x)
    torch._dynamo.reset()
    torch_neuronx.clear_op_tracking()
    seen_ops.clear()
    torch.compile(_breaks_on_eager_ops, backend="neuron")(x)
    assert "aten::nonzero" in seen_ops
    assert not [name for path, name in _codes_dynamo_was_given() if "torch_neuronx" in path]


def test_keeping_dynamo_out_does_not_import_it():
    """The callback is kept out at registration without ``torch._dynamo`` (seconds of import
    that ``import torch_neuronx`` does without) and without a wrapper on the signature path."""
    code = ("import sys, torch_neuronx; from torch_neuronx import accounting; "
            "assert 'torch._dynamo' not in sys.modules, 'import torch_neuronx imported torch._dynamo'; "
            "print(accounting._on_new_signature.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torch_neuronx.accounting"]
