"""The plan on the console (rich) and as ``plan.json``; every row says how its figure was obtained."""
from __future__ import annotations

import json
from pathlib import Path

GiB = 2**30


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _usd(x: float | None) -> str:
    return "no price" if x is None else f"${x:,.4f}"


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


def show(plan: dict, console) -> None:
    from rich.table import Table

    lay, mem, t = plan["layout"], plan["memory"], plan["time"]
    console.print(f"[bold]{plan['model']}[/bold] ({plan['model_type']}, {plan['parameters']['total'] / 1e9:.2f} B "
                  f"parameters) on {lay['instances']}×{plan['instance']}, LNC={lay['lnc']}: "
                  f"{plan['mode']}, TP={lay['tp']} × FSDP={lay['fsdp']} = {lay['world']} ranks, "
                  f"batch {lay['batch']}/rank × seq {plan['seq_len']}, {plan['dtype']}, "
                  f"checkpointing {'on' if lay['checkpointing'] else 'off'}")
    console.print(f"[dim]{plan['method']}[/dim]")
    table = Table(title="per rank (one logical NeuronCore)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("how")
    for kind, n in mem["bytes"].items():
        table.add_row(f"HBM: {kind.replace('_', ' ')}", _gib(n),
                      "assumed" if kind == "runtime_reserve" else "emulated")
    for key in ("activations_peak_with_checkpointing", "activations_peak_without_checkpointing"):
        if key in mem:
            table.add_row(f"  ({key.replace('_', ' ')})", _gib(mem[key]), "emulated")
    verdict = "[green]fits[/green]" if mem["fits"] else "[red]does not fit[/red]"
    table.add_row("HBM: total / capacity", f"{_gib(mem['total_bytes'])} / {_gib(mem['hbm_bytes'])}", verdict)
    c = t["compile"]
    table.add_row("distinct kernels (first run compiles)", str(c["eager_kernel_compiles"]), "emulated")
    table.add_row("first-run compile time", f"{c['first_run_compile_seconds']:.0f} s", "projected")
    table.add_row("step: compute", f"{t['compute_seconds']:.3f} s", "projected")
    for link, s in t["collectives_by_link"].items():
        table.add_row(f"step: collectives over {link}", f"{s:.3f} s", "projected")
    for link, u in t["collectives_unprojected"].items():
        table.add_row(f"step: collectives over {link}", "not projected", u["reason"])
    table.add_row("step time (no overlap … full overlap)",
                  f"{t['step_seconds_no_overlap']:.3f} … {t['step_seconds_full_overlap']:.3f} s", "projected")
    tps = t["tokens_per_second"]
    table.add_row("tokens/s (whole job)", "no tokens" if tps is None else f"{tps:,.0f}", "projected")
    table.add_row("MFU", f"{t['mfu']:.1%}", "projected")
    table.add_row("cost per step", _usd(t["usd_per_step"]), "projected")
    table.add_row("cost per billion tokens", _usd(t["usd_per_billion_tokens"]), "projected")
    console.print(table)
    if not mem["fits"]:
        s = plan.get("suggestion")
        console.print(f"[red]does not fit[/red]: smallest change that fits: {s['change']}" if s else
                      "[red]does not fit[/red], and no layout of up to 64 instances fits")


def show_sweep(rows: list[dict], console) -> None:
    from rich.table import Table

    table = Table(title="fitting layouts, cheapest per token first (projected)")
    for col in ("TP", "FSDP", "batch", "ckpt", "HBM/rank", "step s", "tokens/s", "MFU", "$ / B tokens"):
        table.add_column(col, justify="right")
    for r in rows:
        lay = r["layout"]
        table.add_row(str(lay["tp"]), str(lay["fsdp"]), str(lay["batch"]), "on" if lay["checkpointing"] else "off",
                      _gib(r["memory_total_bytes"]), f"{r['step_seconds']:.3f}", "–" if r["tokens_per_second"] is None else f"{r['tokens_per_second']:,.0f}",
                      f"{r['mfu']:.1%}", _usd(r["usd_per_billion_tokens"]))
    console.print(table if rows else "[red]no layout of the sweep fits[/red]")
