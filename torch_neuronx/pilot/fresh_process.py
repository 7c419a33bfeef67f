"""The checkpoint step's fresh process: reload the checkpoint, time the first calls.

Started by :func:`run_in_child` over :mod:`torch_neuronx.testing.child_process`.
A fresh interpreter is the honest test of both questions it
answers: does the saved checkpoint give the same outputs without any state of
the process that wrote it, and how much of the compilation does the persistent
cache save on a second run.
"""
from __future__ import annotations

import sys
import time

import torch

from ..testing.child_process import ChildFailed, ChildProcess, serve


def _first_calls(model, batches: dict, device, sync) -> dict:
    seconds = {}
    for length, rows in sorted(batches.items(), key=lambda kv: int(kv[0])):
        ids = torch.tensor(rows, device=device)
        sync()
        start = time.perf_counter()
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
        sync()
        seconds[str(length)] = time.perf_counter() - start
    return seconds


def run(request: dict) -> dict:
    from . import compiler
    from .config import DTYPES
    from .device import resolve_device, set_core_capacity
    from .model import load_checkpoint
    from .perf import synchronizer

    device = resolve_device(request["device"])
    if request.get("hbm_per_core_gib") and device.type == "neuron":
        set_core_capacity(request["hbm_per_core_gib"])
    sync = synchronizer(device)
    start = time.perf_counter()
    model = load_checkpoint(request["checkpoint"], DTYPES[request["dtype"]], request["attn"]).eval().to(device)
    result = {"load_seconds": time.perf_counter() - start, "modes": {}}
    for mode in request["modes"]:
        compiler.reset_fidelity()
        compiler.reset_dynamo()
        if mode == "compile":
            with compiler.compiled_forward(model, compiler.backend_for(device)):
                seconds = _first_calls(model, request["batches"], device, sync)
                dynamo = compiler.dynamo_metrics()
        else:
            seconds = _first_calls(model, request["batches"], device, sync)
            dynamo = None
        result["modes"][mode] = {"first_call_seconds": seconds,
                                 "fidelity": compiler.fidelity_metrics(device), "dynamo": dynamo}
    # After the timings, so that they are first calls; eager, like the saving process's reference.
    first = min(request["batches"], key=int)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(request["batches"][first], device=device), use_cache=False).logits
    torch.save(logits.to("cpu"), request["logits_out"])
    return result


def run_in_child(request: dict, timeout: float) -> dict:
    """Answer ``request`` in a new interpreter; a failure there is one line (``RuntimeError``)."""
    with ChildProcess("torch_neuronx.pilot.fresh_process") as child:
        try:
            return child.request(request, timeout)
        except ChildFailed as exc:
            raise RuntimeError(f"fresh process failed: {exc}") from None


if __name__ == "__main__":
    sys.exit(serve(lambda request, emit: run(request)))
