"""The sweep as a table whose columns are the job's own figures: training by step time, MFU and
cost per billion tokens; a decoder's serving by TTFT, time per output token, tokens/s and cost
per 1M output tokens; an encoder's by latency, sequences/s and cost per 1M sequences. Short
headers and compact numbers keep it inside an 80-column terminal without cutting a value."""
from __future__ import annotations

from .search import SweepRow

GiB = 2**30


def _money(x: float | None) -> str:
    return "–" if x is None else f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:,.1f}" if x >= 0.01 else f"{x * 1e3:.2f}"


def _rate(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def columns(kind: str) -> tuple[str, ...]:
    """The headers for a sweep of ``kind`` (train, decoder or encoder)."""
    common = ("TP",)
    if kind == "train":
        return common + ("PP", "DP", "µbatch", "ckpt", "GiB/rank", "step s", "tokens/s", "MFU", "$/B tok")
    if kind == "decoder":
        return common + ("replicas", "batch", "GiB/rank", "TTFT ms", "TPOT ms", "tokens/s", "$/1M tok")
    return common + ("replicas", "batch", "GiB/rank", "latency ms", "seq/s", "$/1M seq")


def cells(kind: str, row: SweepRow) -> list[str]:
    lay, f = row.layout, row.figures
    hbm = f"{row.memory_total_bytes / GiB:.1f}"
    if kind == "train":
        return [str(lay.tp), str(lay.pp), str(lay.dp), str(lay.batch), "on" if lay.checkpointing else "off", hbm,
                f"{f['step_seconds']:.3f}", _rate(f["tokens_per_second"]),
                "–" if f["mfu"] is None else f"{f['mfu']:.1%}", _money(f["usd_per_billion_tokens"])]
    if kind == "decoder":
        return [str(lay.tp), str(lay.dp), str(lay.batch), hbm, _ms(f["ttft_seconds"]), _ms(f["tpot_seconds"]),
                _rate(f["tokens_per_second"]), _money(f["usd_per_million_output_tokens"])]
    return [str(lay.tp), str(lay.dp), str(lay.batch), hbm, _ms(f["latency_seconds"]),
            _rate(f["sequences_per_second"]), _money(f["usd_per_million_sequences"])]


def title(kind: str) -> str:
    what = "per token" if kind == "train" else "per 1M output tokens" if kind == "decoder" else "per 1M sequences"
    return f"fitting layouts, cheapest {what} first (projected)"


def show_sweep(kind: str, rows: list[SweepRow], console) -> None:
    from rich import box
    from rich.table import Table

    if not rows:
        console.print("[red]no layout of the sweep fits[/red]")
        return
    table = Table(title=title(kind), box=box.SIMPLE_HEAD, pad_edge=False)
    for col in columns(kind):
        table.add_column(col, justify="right", no_wrap=True, overflow="fold")
    for r in rows:
        table.add_row(*cells(kind, r))
    console.print(table)
