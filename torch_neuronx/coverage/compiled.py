"""The compiled checks of one architecture: ``torch.compile(backend="neuron")`` against eager CPU.

Per attention implementation the architecture supports (``sdpa``, ``eager``):
a compiled forward, a compiled training step (loss and gradients) and greedy
``generate`` with a static cache, which Transformers compiles by itself on
``neuron``. Graph lowering to StableHLO is on, as on Trainium. A failure is
classified by who shares it: ``shared`` when torch-mlir names an op it cannot
lower (:attr:`LoweringError.unsupported`: the real product lowers
with the same torch-mlir and fails the same way) or when the product's own
compile decompositions refuse the graph (:class:`index_put.UnsupportedOnNeuron`),
``ours`` for anything else
(a Dynamo or backend error, a result that differs from the CPU's, nothing
compiled): only the emulator fails that way.
"""
from __future__ import annotations

import copy
import re
import time

import torch

from ..runtime.errors import first_line
from ..testing.tiny_models import TinySize, tiny_causal_lm
from .probe import differs_from_cpu, gradients, greedy_tokens, logits_of, token_batch

ATTENTION = ("sdpa", "eager")
COMPILED_CHECKS = ("compiled_forward", "compiled_backward", "compiled_generate_static")
REFERENCE = {"compiled_forward": "forward", "compiled_backward": "backward",
             "compiled_generate_static": "generate_static"}
SHARED, OURS = "shared", "ours"
NOT_APPLICABLE = "not applicable"
_NAMED_OP = re.compile(r"no lowering for (\S+)")


def _chain(exc: BaseException):
    """``exc`` and the exceptions it was raised from or during (Dynamo wraps the backend's)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def classify_failure(exc: BaseException) -> dict:
    """``error`` (the op torch-mlir names, else the outer error and its root cause), ``cause``
    (``shared`` or ``ours``) and ``op`` (the op that does not lower, or None)."""
    from ..compile.lowering.decompositions.index_put import UnsupportedOnNeuron
    from ..compile.lowering.errors import LoweringError

    chain = list(_chain(exc))
    lowering = next((e for e in chain if isinstance(e, LoweringError)), None)
    if lowering is not None and lowering.unsupported:
        named = _NAMED_OP.search(str(lowering))
        return {"ok": False, "error": first_line(lowering, limit=300), "cause": SHARED,
                "op": named.group(1) if named else None}
    refused = next((e for e in chain if isinstance(e, UnsupportedOnNeuron)), None)
    if refused is not None:  # the real product's own decompositions refuse the graph
        return {"ok": False, "error": first_line(refused, limit=300), "cause": SHARED, "op": refused.op}
    outer, root = first_line(exc, limit=200), first_line(chain[-1], limit=200)
    return {"ok": False, "error": outer if root in outer else f"{outer} ← {root}", "cause": OURS, "op": None}


def _compile_record() -> dict:
    """What ``backend="neuron"`` compiled since the last reset: graphs, how many lowered, fallbacks."""
    from ..compile.dynamo_metrics import get_dynamo_metrics

    metrics = get_dynamo_metrics()
    graphs = metrics["compiled_graphs"]
    return {"graphs": metrics["graphs_compiled"], "aot_graphs": len(graphs),
            "lowered": sum(g["lowering"] == "lowered" for g in graphs), "stablehlo_ops": metrics["stablehlo_ops"],
            "fallbacks": metrics["fallbacks"]}


def _device_steps(model, ids) -> dict:
    """The compiled checks on ``model`` (on the device); fallback to eager execution off."""
    compiled = torch.compile(model, backend="neuron", options={"fallback_execution": False})
    return {
        "compiled_forward": lambda: logits_of(compiled, ids),
        "compiled_backward": lambda: gradients(model, ids, call=compiled),
        "compiled_generate_static": lambda: greedy_tokens(model, ids, static=True, auto_compile=True),
    }


def _run_compiled(name: str, step, reference: dict, cpu: dict) -> dict:
    """One compiled check: it must compile something, lower, not fall back, and match the CPU.

    Dynamo starts afresh, as in a process that runs only this step: its recompile limit counts
    per code object, and a code object can serve many methods (Transformers' ``deprecate_kwarg``
    wrapper is one for every method it decorates), so the checks before would use up the entries
    a later one needs and leave it running eagerly, on any device and backend."""
    from ..compile.dynamo_metrics import reset_dynamo_metrics

    if not cpu[REFERENCE[name]]["ok"]:
        return {"ok": None, "error": f"not compared: fails on CPU ({cpu[REFERENCE[name]]['error']})",
                "cause": None, "op": None}
    torch._dynamo.reset()
    reset_dynamo_metrics()
    start = time.perf_counter()
    try:
        out = step()
        record = _compile_record()
        if not record["graphs"]:
            detail = "nothing was compiled"
        elif record["fallbacks"]:
            detail = f"a graph fell back to eager execution: {record['fallbacks'][0]}"
        else:
            detail = differs_from_cpu(REFERENCE[name], out, reference[REFERENCE[name]])
        result = {"ok": detail is None, "error": detail, "cause": OURS if detail else None, "op": None}
    except Exception as exc:  # every failure is data for the table
        record = _compile_record()
        result = classify_failure(exc)
    result.update(compile=record, seconds=round(time.perf_counter() - start, 3))
    return result


def not_auto_compiled(model) -> str | None:
    """Why the static-cache ``generate`` check does not apply: Transformers compiles a model's
    decoding by itself only when the model declares it can be captured whole
    (``_can_compile_fullgraph``) and ``get_compiled_call`` returns a compiled call (it returns
    the model's own ``__call__`` for some, e.g. every Llama 4); otherwise it never does, on any device."""
    if not getattr(model, "_can_compile_fullgraph", False):
        reason = "_can_compile_fullgraph is False"
    elif model.get_compiled_call(model.generation_config.compile_config) == model.__call__:
        reason = "its get_compiled_call returns the model uncompiled"
    else:
        return None
    return f"{NOT_APPLICABLE}: Transformers never compiles {type(model).__name__}'s generate ({reason}), on any device"


def _cpu_reference(model, ids) -> tuple[dict, dict]:
    """Eager CPU outputs of the checks the compiled ones are compared with."""
    steps = {"forward": lambda: logits_of(model, ids), "backward": lambda: gradients(model, ids),
             "generate_static": lambda: greedy_tokens(model, ids, static=True)}
    outputs, results = {}, {}
    for name, step in steps.items():
        try:
            outputs[name] = step()
            results[name] = {"ok": True, "error": None}
        except Exception as exc:
            results[name] = {"ok": False, "error": first_line(exc, limit=200)}
    return outputs, results


def probe_attention(model_type: str, attention: str, device: str, size: TinySize = TinySize()) -> dict:
    """The compiled checks of ``model_type`` built tiny at ``size`` with ``attention``; ``supported``
    False when it cannot be."""
    try:
        model = tiny_causal_lm(model_type, size=size, attn_implementation=attention)
    except Exception as exc:  # Transformers refuses an implementation the architecture lacks
        return {"supported": False, "error": first_line(exc, limit=200)}
    ids = token_batch(model)  # the batch of the eager checks: same seed, same vocabulary
    reference, cpu = _cpu_reference(model, ids)
    try:
        target = torch.device(device)
        dev_model = copy.deepcopy(model).to(target)
        steps = _device_steps(dev_model, ids.to(target))
        skipped = {"compiled_generate_static": not_auto_compiled(dev_model)}
        checks = {name: {"ok": None, "error": skipped[name], "cause": None, "op": None} if skipped.get(name)
                  else _run_compiled(name, steps[name], reference, cpu) for name in COMPILED_CHECKS}
    finally:
        torch._dynamo.reset()
    return {"supported": True, "cpu": cpu, "checks": checks}


def probe_compiled(model_type: str, device: str, on_phase=lambda phase: None, size: TinySize = TinySize()) -> dict:
    """The compiled checks per attention implementation (JSON-ready), graph lowering on."""
    from ..runtime.settings import get_flag

    results = {"lowering": bool(get_flag("TORCHNEURON_LOWER_GRAPHS"))}
    for attention in ATTENTION:
        on_phase(f"compiled {attention}")
        results[attention] = probe_attention(model_type, attention, device, size)
    results["status"] = compiled_status(results)
    return results


def compiled_status(results: dict) -> str:
    """pass | shared_fail (only failures the real product shares) | ours_fail (some failure is the
    emulator's own) | not_run (no implementation supported, or every check fails on CPU)."""
    checks = [c for a in ATTENTION if results.get(a, {}).get("supported")
              for c in results[a]["checks"].values() if c["ok"] is not None]
    if results.get("crashed") or any(c["cause"] == OURS for c in checks):
        return "ours_fail"
    if any(c["cause"] == SHARED for c in checks):
        return "shared_fail"
    return "pass" if checks else "not_run"
