"""Step "Compilation": the cold first call of every shape, then a warm one that must compile nothing."""
from __future__ import annotations

import contextlib
import dataclasses
import time

import torch

from ...html_report.markup import e, img, num, table
from .. import compiler, perf
from ..report import plots
from ..report.schema import Check

TITLE = "Compilation"


@dataclasses.dataclass
class CompilationResult:
    # mode -> {available, reason?, backend, shapes: {seq_len: {cold, warm}}, fidelity, dynamo}
    modes: dict[str, dict] = dataclasses.field(default_factory=dict)
    fresh_process: dict | None = None  # mode -> first-call seconds etc. in a new interpreter
    # mode -> the StableHLO size of each distinct kernel signature of the cold calls (None: not
    # lowered); the projected first-run compile of the mode is made from it (not in the JSON)
    eager_sizes: dict[str, list] = dataclasses.field(default_factory=dict)

    def to_data(self) -> dict:
        data = {"modes": dict(self.modes)}
        if self.fresh_process is not None:
            data["fresh_process"] = self.fresh_process
        return data


RESULT = CompilationResult  # made empty before the first mode: a step no mode reached says so


def mark_unavailable(result: CompilationResult, mode: str, reason: str) -> None:
    result.modes[mode] = {"available": False, "reason": reason}


def run(result: CompilationResult, mode: str, dev_model, device: torch.device, batches: dict,
        advance) -> list[Check]:
    """Cold first call per shape (compiles), then a warm call (must not compile again)."""
    data = result.modes.setdefault(mode, {"available": True})
    data["backend"] = compiler.backend_for(device) if mode == "compile" else None
    sync = perf.synchronizer(device)
    shapes, checks = {}, []
    data["shapes"] = shapes
    compiler.reset_dynamo()
    lowers = _lowers_eager(mode, device)
    signatures: set[str] = set()  # distinct kernel signatures of the cold calls (shared shapes once)
    for length, rows in sorted(batches.items()):
        ids = torch.tensor(rows, device=device)
        entry = {}
        for phase in ("cold", "warm"):
            compiler.reset_fidelity()
            graphs_before = compiler.dynamo_metrics()["dynamo_unique_graphs"]
            sync()
            start = time.perf_counter()
            with torch.no_grad(), _eager_lowering(lowers and phase == "cold"):
                dev_model(input_ids=ids, use_cache=False)
            sync()
            fid = compiler.fidelity_metrics(device)
            if phase == "cold":
                signatures |= compiler.signature_keys(device)
            entry[phase] = {
                "seconds": time.perf_counter() - start,
                "new_graphs": compiler.dynamo_metrics()["dynamo_unique_graphs"] - graphs_before,
                "kernel_compilations": fid["kernels"]["misses"] if fid["available"] else None,
                "kernel_signatures": fid["kernels"]["unique_signatures"] if fid["available"] else None,
                "kernel_disk_hits": fid["kernels"]["disk_hits"] if fid["available"] else None,
            }
            advance()
        shapes[str(length)] = entry
        warm = entry["warm"]
        stable = warm["new_graphs"] == 0 if mode == "compile" else warm["kernel_compilations"] in (0, None)
        what = "graphs" if mode == "compile" else "kernel compilations"
        checks.append(Check(f"{mode}: repeat call seq={length} compiles nothing new", stable,
                            warm["new_graphs"] if mode == "compile" else warm["kernel_compilations"], 0,
                            f"new {what} on the second call of the same shape"))
    data["fidelity"] = compiler.fidelity_metrics(device)
    lowering = data["lowering"] = _lowering(signatures) if lowers else None
    result.eager_sizes[mode] = list(_sizes(signatures, lowers).values())
    end_mode_with(result, mode, device)
    return checks + _lowering_checks(lowering)


def end_mode_with(result: CompilationResult, mode: str, device: torch.device) -> None:
    """The mode's graphs so far and its projected first-run compile: every distinct kernel
    signature of the cold calls (a lowered one by its StableHLO size) and every graph compiled."""
    data = result.modes[mode]
    data["dynamo"] = compiler.dynamo_metrics() if mode == "compile" else None
    data["projected_compile"] = compiler.projected_compile(device, result.eager_sizes.get(mode, []), data["dynamo"])


def run_mode(ctx, mode: str) -> None:
    """Cold and warm calls of every known shape in ``mode`` (runs first in each mode block)."""
    with ctx.part(f" ({mode})", total=2 * len(ctx.known.batches)) as advance:
        ctx.add_checks(run(ctx.section.result, mode, ctx.model, ctx.device, ctx.known.batches, advance))


def end_mode(ctx, mode: str) -> None:
    """At the end of the mode block: its compiled graphs are every step's (generation and timing
    compile graphs of their own), and so is the projected compile."""
    if mode in ctx.section.result.modes:
        end_mode_with(ctx.section.result, mode, ctx.device)


# --- eager kernels lowered to StableHLO (the opt-in of compile/kernel_lowering.py) ---

def _lowers_eager(mode: str, device: torch.device) -> bool:
    """Eager on neuron: each new kernel of the cold calls is lowered as the real product would."""
    return mode == "eager" and device.type == "neuron"


@contextlib.contextmanager
def _eager_lowering(on: bool):
    if not on:
        yield
        return
    from torch_neuronx.compile import kernel_lowering

    was_on = kernel_lowering.eager_lowering_active()
    kernel_lowering.set_eager_lowering(True)
    try:
        yield
    finally:
        kernel_lowering.set_eager_lowering(was_on)


LOWERING_KEYS = ("checked", "signatures", "signatures_lowered", "stablehlo_ops_per_op", "would_fall_back_to_cpu",
                 "fallback_only_for_unimplemented_ops")


def _lowering(signatures: set[str]) -> dict:
    """The lowering of the cold calls' distinct kernel signatures (one shared by two shapes, once)."""
    from torch_neuronx.compile import kernel_lowering

    report = kernel_lowering.eager_lowering_report(signatures)
    return {key: report[key] for key in LOWERING_KEYS}


def _sizes(signatures: set[str], lowered: bool) -> dict[str, int | None]:
    if not lowered:
        return dict.fromkeys(signatures)
    from torch_neuronx.compile import kernel_lowering

    return kernel_lowering.stablehlo_sizes(signatures)


def _lowering_checks(lowering: dict | None) -> list[Check]:
    """A CPU fallback is no error on the real product (release default), so ops that do not lower
    are listed, not failed — unless ``TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1``."""
    if not lowering or not lowering["fallback_only_for_unimplemented_ops"]:
        return []
    missing = lowering["would_fall_back_to_cpu"]
    return [Check("eager: every kernel lowers to StableHLO (fallback only for unimplemented ops)", not missing,
                  len(missing), 0, "; ".join(sorted(missing)))]


def _lowering_html(lowering: dict | None) -> str:
    if not lowering:
        return ""
    if not lowering["checked"]:
        return "<p class='muted'>eager kernel lowering: not checked (torch-mlir is not installed)</p>"
    missing = lowering["would_fall_back_to_cpu"]
    head = (f"<p><b>eager kernels lowered to StableHLO</b> (emulated check, cold calls): "
            f"{lowering['signatures_lowered']}/{lowering['signatures']} kernel signatures, "
            f"{sum(lowering['stablehlo_ops_per_op'].values())} StableHLO ops; "
            f"{len(missing)} ops would {'fail' if lowering['fallback_only_for_unimplemented_ops'] else 'fall back to CPU'}</p>")
    if not missing:
        return head
    return head + table(["op that does not lower", "why"], [[e(op), e(why)] for op, why in missing.items()])


def summary(r: CompilationResult) -> str:
    parts = []
    for mode, entry in r.modes.items():
        shapes = entry.get("shapes", {})
        if not shapes:
            continue
        cold = sum(s["cold"]["seconds"] for s in shapes.values())
        warm = sum(s["warm"]["seconds"] for s in shapes.values())
        fresh = (r.fresh_process or {}).get(mode, {}).get("first_call_seconds", {})
        part = f"{mode}: cold {cold:.2f}s vs steady {warm:.3f}s over {len(shapes)} shapes"
        if fresh:
            part += f", fresh process first calls {sum(fresh.values()):.2f}s"
        missing = (entry.get("lowering") or {}).get("would_fall_back_to_cpu")
        if missing:
            part += f", {len(missing)} ops do not lower to StableHLO"
        parts.append(part)
    parts += [f"{mode}: not available" for mode, entry in r.modes.items() if not entry.get("available", True)]
    return "; ".join(parts)


def html(data: dict) -> str:
    out = []
    for mode, entry in data.get("modes", {}).items():
        if not entry.get("available", True):
            out.append(f"<p><b>{e(mode)}</b>: not available — {e(entry.get('reason'))}</p>")
            continue
        fresh = data.get("fresh_process", {}).get(mode, {}).get("first_call_seconds", {})
        rows = [[e(length), num(s["cold"]["seconds"], "{:.3f}"), num(s["warm"]["seconds"], "{:.4f}"),
                 num(fresh.get(length), "{:.3f}"), num(s["cold"]["kernel_compilations"]),
                 num(s["cold"]["kernel_disk_hits"]), num(s["cold"]["new_graphs"])]
                for length, s in entry.get("shapes", {}).items()]
        out.append(f"<h3>{e(mode)}" + (f" (backend {e(entry['backend'])})" if entry.get("backend") else "") + "</h3>")
        out.append(table(["seq len", "cold first call s", "steady call s", "fresh process first call s",
                          "kernel compilations (eager)", "NEFF cache disk hits", "new graphs (compile)"], rows))
        projected = entry.get("projected_compile")
        if projected:
            out.append(f"<p><b>projected first-run neuronx-cc time ({e(mode)})</b>: "
                       f"{num(projected['seconds'], '{:.1f}')} s — {e(projected['basis'])}</p>")
        dyn = (entry.get("dynamo") or {}).get("neuron_backend") or {}
        if dyn.get("available"):
            out.append(table(["graphs", "recompilations", "graph breaks", "compile s", "execution s",
                              "cache hits", "cache misses"],
                             [[num(dyn.get(k)) for k in ("graphs_compiled", "recompilations", "graph_breaks",
                                                         "compile_seconds", "execution_seconds", "cache_hits",
                                                         "cache_misses")]]))
            for r in dyn.get("recompile_reasons", []):
                out.append(f"<p class='muted'>recompile {e(r['compile_id'])}: {e(r['reason'])}</p>")
            for b in dyn.get("graph_break_reasons", []):
                out.append(f"<p class='muted'>graph break {e(b['compile_id'])}: {e(b['reason'])}</p>")
        out.append(_lowering_html(entry.get("lowering")))
        fid = entry.get("fidelity") or {}
        if fid.get("available") is False:
            out.append(f"<p class='muted'>per-shape compilation accounting: not available — {e(fid.get('reason'))}</p>")
    out.append("<p class='muted'>On the emulator a first call costs little more than a steady one, because "
               "kernels are not really compiled; the projected Trainium compile time is the one figure per mode "
               "above (docs/projection.md). In compile mode the graph compiler really runs, so its cold calls "
               "are real host compile time.</p>")
    out.append(img(plots.compile_vs_run(data.get("modes", {})), "compile vs run time"))
    return "".join(out)
