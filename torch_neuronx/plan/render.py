"""The plan on the console (rich) and as ``plan.json``; every row says how its figure was
obtained, and every projected time, throughput and cost carries the projection's error band.
A layout that does not fit leads with the change that fits, and its figures say "if it fit"."""
from __future__ import annotations

import json
from pathlib import Path

from .planner import Plan

GiB = 2**30


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _usd(x: float | None, digits: int = 4) -> str:
    return "no price" if x is None else f"${x:,.{digits}f}"


def _ms(x: float) -> str:
    return f"{x * 1e3:,.1f}" if x >= 0.01 else f"{x * 1e3:,.2f}"


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


def headline(plan: Plan) -> str:
    """One line: model, instances, layout, precision."""
    lay, job = plan.layout, plan.job
    if job.mode == "train":
        shape = f"TP={lay.tp} × PP={lay.pp} × DP={lay.dp} ({lay.shard}) = {lay.world} ranks"
        batch = f"micro-batch {lay.batch} × {lay.micro_batches} per rank per step × seq {job.seq_len}"
    else:
        shape = f"TP={lay.tp} × {lay.dp} replica(s)"
        batch = (f"batch {lay.batch} × {job.seq_len} tokens" if plan.kind != "decoder" else
                 f"batch {lay.batch}, {job.seq_len} tokens in / {plan.output_len} out, static cache {plan.max_len}")
    weights = f", {job.weight_dtype} weights" if job.weight_dtype else ""
    return (f"{job.model} ({plan.model_type} {plan.kind}, {plan.parameters.total / 1e9:.2f} B parameters) on "
            f"{lay.instances}×{job.instance}, LNC={lay.lnc}: {job.mode}, {shape}, {batch}, "
            f"{job.precision}{weights}, {plan.time.mode} mode"
            + (f", checkpointing {'on' if lay.checkpointing else 'off'}" if job.mode == "train" else ""))


def layout_notes(plan: Plan) -> list[str]:
    """The TP plan, the heads' padding and the idle cores, one line each."""
    notes = []
    if plan.layout.tp > 1:
        notes.append(f"tensor parallelism: {plan.parameters.tp_plan}")
        if plan.heads is not None:
            extra = plan.memory.padding_bytes
            notes.append(f"heads: {plan.heads.describe()}"
                         + (f" (+{_gib(extra)} of weights per core)" if extra else ""))
    c = plan.cores
    if c.idle:
        cost = f", {_usd(c.idle_usd_per_hour, 2)}/h of the instances' price" if c.idle_usd_per_hour else ""
        notes.append(f"cores: the layout uses {c.used} of the {c.total} logical cores; {c.idle} idle{cost}")
    return notes


def memory_rows(plan: Plan) -> list[tuple[str, str, str]]:
    mem = plan.memory
    rows = [(f"HBM: {kind.replace('_', ' ')}", _gib(n), "assumed" if kind == "runtime_reserve" else "emulated")
            for kind, n in mem.bytes.items()]
    for key, n in mem.other_checkpointing.items():
        rows.append((f"  ({key.replace('_', ' ')})", _gib(n), "emulated"))
    rows.append(("HBM: total / capacity", f"{_gib(mem.total_bytes)} / {_gib(mem.hbm_bytes)}",
                 "fits" if mem.fits else "does not fit"))
    return rows


def _band(plan: Plan, figure: str) -> str:
    if plan.time.mode != "compile":
        return "projected (eager mode: no published result to hold it against)"
    bands = {"step_seconds": plan.time.band} if plan.job.mode == "train" else plan.time.bands
    return f"projected ±{bands[figure].fraction:.0%}" + ("" if plan.fits else ", if it fit")


def _training_rows(plan: Plan) -> list[tuple[str, str, str]]:
    t, other = plan.time.chosen, "eager" if plan.time.mode == "compile" else "compile"
    band = _band(plan, "step_seconds")
    cost = plan.time.cost
    return [("micro-batches per rank per global batch", str(plan.layout.micro_batches), "emulated (G / (M·D))"),
            ("pipeline bubble (P−1)/(m+P−1)", f"{t.bubble_fraction:.1%}", "projected"),
            ("micro-batch: forward / backward", f"{t.forward_seconds:.4f} / {t.backward_seconds:.4f} s", "projected"),
            ("micro-batch: collectives and pipeline sends", f"{t.micro_collective_seconds:.4f} s", "projected"),
            ("global batch: gradient reduction", f"{t.step_collective_seconds:.4f} s", "projected"),
            ("global batch: optimizer step", f"{t.optimizer_seconds:.4f} s", "projected"),
            ("step time (one global batch)", f"{t.step_seconds:.3f} s", band),
            (f"  ({other} mode)", f"{plan.time.by_mode[other].step_seconds:.3f} s", "projected"),
            ("tokens/s (whole job)", f"{t.tokens_per_second:,.0f}", band),
            ("MFU", f"{t.mfu:.1%}", band),
            ("cost per step", _usd(cost.usd), band),
            ("cost per billion tokens", _usd(cost.usd_per_billion_tokens, 2), band)]


def _serving_rows(plan: Plan) -> list[tuple[str, str, str]]:
    t, other = plan.time.chosen, plan.time.by_mode["eager" if plan.time.mode == "compile" else "compile"]
    through, cost, replicas = plan.time.throughput(), plan.time.cost, plan.layout.dp
    if plan.time.encoder:
        band = _band(plan, "latency_seconds")
        return [("latency of one batch (forward graph)", f"{_ms(t.latency_seconds)} ms", band),
                ("  (other mode)", f"{_ms(other.latency_seconds)} ms", "projected"),
                ("sequences/s per core", f"{through['sequences_per_second_per_core']:,.1f}", band),
                (f"sequences/s ({replicas} replica(s))", f"{through['sequences_per_second']:,.1f}", band),
                ("cost per 1M sequences", _usd(cost.usd_per_million_tokens, 2), band)]
    band, ttft = _band(plan, "tpot_seconds"), _band(plan, "ttft_seconds")
    return [("time to first token (prefill graph)", f"{_ms(t.ttft_seconds)} ms", ttft),
            ("time per output token (decode, whole static cache)", f"{_ms(t.tpot_seconds)} ms", band),
            ("  (other mode) TTFT / TPOT", f"{_ms(other.ttft_seconds)} / {_ms(other.tpot_seconds)} ms", "projected"),
            ("output tokens/s per replica (end to end)", f"{through['tokens_per_second_per_replica']:,.1f}", band),
            (f"output tokens/s ({replicas} replica(s))", f"{through['tokens_per_second']:,.1f}", band),
            ("cost per 1M output tokens", _usd(cost.usd_per_million_tokens, 2), band)]


def time_rows(plan: Plan) -> list[tuple[str, str, str]]:
    """Compilation, time, throughput and cost; projected figures carry their error band."""
    c = plan.time.compilation
    rows = [("distinct kernels (traced)", f"{c.distinct_kernels:,}", "emulated"),
            (f"first-run compile time ({c.projection.programs} programs)", f"{c.projection.seconds:.0f} s",
             "projected")]
    return rows + (_training_rows(plan) if plan.job.mode == "train" else _serving_rows(plan))


def band_note(plan: Plan) -> str:
    """Where the ± of the projected figures comes from, in one line."""
    if plan.job.mode == "train":
        return f"± on projected figures: {plan.time.band.text()}; see docs/projection.md."
    parts = [f"{name.removesuffix('_seconds').upper()} {b.text()}" for name, b in plan.time.bands.items()]
    return "± on projected figures: " + "; ".join(parts) + "; throughput and cost carry the last; see " \
                                                           "docs/projection.md."


def verdict(plan: Plan) -> str:
    """The first line when the layout does not fit: the change that fits, else why none does."""
    s = plan.suggestion
    if s is not None:
        return f"does not fit: smallest change that fits: {s.change}"
    return "does not fit, and no layout of up to 64 instances fits"


def show(plan: Plan, console) -> None:
    from rich.table import Table

    if not plan.fits:
        console.print(f"[red]{verdict(plan)}[/red]")
    console.print(f"[bold]{headline(plan)}[/bold]")
    for line in [plan.method] + layout_notes(plan):
        console.print(f"[dim]{line}[/dim]")
    title = "per rank (one logical NeuronCore)" + ("" if plan.fits else ": figures as if it fit")
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("how")
    for row in memory_rows(plan) + time_rows(plan):
        table.add_row(*row)
    console.print(table)
    console.print(band_note(plan))
