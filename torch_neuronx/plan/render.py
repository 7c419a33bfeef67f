"""The plan on the console (rich) and as ``plan.json``; every row says how its figure was
obtained, and every projected time, throughput and cost carries the projection's error band."""
from __future__ import annotations

import json
from pathlib import Path

GiB = 2**30


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _usd(x: float | None, digits: int = 4) -> str:
    return "no price" if x is None else f"${x:,.{digits}f}"


# the sections every plan.json has: how a rerun recognises a file it may replace
PLAN_KEYS = frozenset({"model", "instance", "layout", "memory", "time"})


def json_text(plan: dict) -> str:
    """``plan.json``'s text: strict JSON (a NaN or infinite figure is a ValueError, not ``NaN``)."""
    return json.dumps(plan, indent=2, default=str, allow_nan=False) + "\n"


def is_plan_json(path: Path) -> bool:
    """Whether ``path`` holds a plan written by ``torchneuron plan`` (which a rerun may replace)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and PLAN_KEYS <= data.keys()


def headline(plan: dict) -> str:
    """One line: model, instances, layout, precision."""
    lay = plan["layout"]
    shape = (f"TP={lay['tp']} × PP={lay['pp']} × DP={lay['dp']} ({lay['shard']}) = {lay['world']} ranks"
             if plan["mode"] == "train" else f"TP={lay['tp']} × {lay['dp']} replica(s)")
    batch = (f"micro-batch {lay['batch']} × {lay['micro_batches']} per rank per step × seq {plan['seq_len']}"
             if plan["mode"] == "train" else
             f"batch {lay['batch']}, {plan['seq_len']} tokens in / {plan['inference']['output_len']} out")
    return (f"{plan['model']} ({plan['model_type']}, {plan['parameters']['total'] / 1e9:.2f} B parameters) on "
            f"{lay['instances']}×{plan['instance']}, LNC={lay['lnc']}: {plan['mode']}, {shape}, {batch}, "
            f"{plan['precision']}, {plan['time']['mode']} mode, "
            f"checkpointing {'on' if lay['checkpointing'] else 'off'}")


def memory_rows(plan: dict) -> list[tuple[str, str, str]]:
    mem = plan["memory"]
    rows = [(f"HBM: {kind.replace('_', ' ')}", _gib(n), "assumed" if kind == "runtime_reserve" else "emulated")
            for kind, n in mem["bytes"].items()]
    for key in ("activations_peak_with_checkpointing", "activations_peak_without_checkpointing"):
        if key in mem:
            rows.append((f"  ({key.replace('_', ' ')})", _gib(mem[key]), "emulated"))
    rows.append(("HBM: total / capacity", f"{_gib(mem['total_bytes'])} / {_gib(mem['hbm_bytes'])}",
                 "fits" if mem["fits"] else "does not fit"))
    return rows


def time_rows(plan: dict) -> list[tuple[str, str, str]]:
    """Compilation, time, throughput and cost; projected figures carry the error band."""
    t, c = plan["time"], plan["time"]["compile"]
    band = f"projected ±{t['error_band_fraction']:.0%}" if t["mode"] == "compile" else \
        "projected (eager mode: no published result to hold it against)"
    other = "eager" if t["mode"] == "compile" else "compile"
    rows = [("distinct kernels (traced)", f"{c['distinct_kernels']:,}", "emulated"),
            (f"first-run compile time ({c['programs']} programs)", f"{c['seconds']:.0f} s", "projected")]
    if plan["mode"] == "train":
        rows += [("micro-batches per rank per global batch", str(t["micro_batches"]), "emulated (G / (M·D))"),
                 ("pipeline bubble (P−1)/(m+P−1)", f"{t['bubble_fraction']:.1%}", "projected"),
                 ("micro-batch: forward / backward", f"{t['forward_seconds']:.4f} / {t['backward_seconds']:.4f} s",
                  "projected"),
                 ("micro-batch: collectives and pipeline sends", f"{t['micro_collective_seconds']:.4f} s", "projected"),
                 ("global batch: gradient reduction", f"{t['step_collective_seconds']:.4f} s", "projected"),
                 ("global batch: optimizer step", f"{t['optimizer_seconds']:.4f} s", "projected"),
                 ("step time (one global batch)", f"{t['step_seconds']:.3f} s", band),
                 (f"  ({other} mode)", f"{t['by_mode'][other]['step_seconds']:.3f} s", "projected"),
                 ("tokens/s (whole job)", f"{t['tokens_per_second']:,.0f}", band),
                 ("MFU", f"{t['mfu']:.1%}", band),
                 ("cost per step", _usd(t["usd_per_step"]), band),
                 ("cost per billion tokens", _usd(t["usd_per_billion_tokens"], 2), band)]
    else:
        ttft_band = f"projected ±{t['ttft_error_band_fraction']:.0%}" if t["mode"] == "compile" else band
        o = t["by_mode"][other]
        rows += [("time to first token (prefill graph)", f"{t['ttft_seconds'] * 1e3:,.1f} ms", ttft_band),
                 ("time per output token (decode at mean cache)", f"{t['tpot_seconds'] * 1e3:,.2f} ms", band),
                 (f"  ({other} mode) TTFT / TPOT",
                  f"{o['ttft_seconds'] * 1e3:,.1f} / {o['tpot_seconds'] * 1e3:,.2f} ms",
                  "projected"),
                 ("output tokens/s (one batch, end to end)", f"{t['tokens_per_second']:,.1f}", band),
                 ("cost per 1M output tokens", _usd(t["usd_per_million_output_tokens"], 2), band)]
    return rows


def band_note(plan: dict) -> str:
    """Where the ± of the projected figures comes from, in one line."""
    t = plan["time"]
    if plan["mode"] == "train":
        return f"± on projected figures: {t['error_band']}; see docs/projection.md."
    return (f"± on projected figures: TTFT {t['ttft_error_band']}; time per output token, tokens/s and cost "
            f"{t['error_band']}; see docs/projection.md.")


def show(plan: dict, console) -> None:
    from rich.table import Table

    console.print(f"[bold]{headline(plan)}[/bold]")
    console.print(f"[dim]{plan['method']}[/dim]")
    table = Table(title="per rank (one logical NeuronCore)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("how")
    for row in memory_rows(plan) + time_rows(plan):
        table.add_row(*row)
    console.print(table)
    console.print(band_note(plan))
    if not plan["memory"]["fits"]:
        s = plan.get("suggestion")
        console.print(f"[red]does not fit[/red]: smallest change that fits: {s['change']}" if s else
                      "[red]does not fit[/red], and no layout of up to 64 instances fits")


SWEEP_COLUMNS = ("TP", "PP", "DP", "micro-batch", "ckpt", "HBM/rank", "step s", "tokens/s", "MFU", "$ / B tokens")


def sweep_cells(r: dict) -> list[str]:
    lay = r["layout"]
    return [str(lay["tp"]), str(lay["pp"]), str(lay["dp"]), str(lay["batch"]), "on" if lay["checkpointing"] else "off",
            _gib(r["memory_total_bytes"]), f"{r['step_seconds']:.3f}",
            "–" if r["tokens_per_second"] is None else f"{r['tokens_per_second']:,.0f}",
            "–" if r["mfu"] is None else f"{r['mfu']:.1%}", _usd(r["usd_per_billion_tokens"], 2)]


def show_sweep(rows: list[dict], console) -> None:
    from rich.table import Table

    table = Table(title="fitting layouts, cheapest per token first (projected)")
    for col in SWEEP_COLUMNS:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(*sweep_cells(r))
    console.print(table if rows else "[red]no layout of the sweep fits[/red]")
