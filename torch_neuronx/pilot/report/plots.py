"""The pilot report's figures (latency, loss curves, errors, compile and projected time),
drawn with matplotlib and embedded as base64 PNG (``html_report/figures.py``)."""
from __future__ import annotations

from matplotlib.ticker import MaxNLocator

from ...html_report.figures import plt, png

COLORS = {"eager": "#1f77b4", "compile": "#ff7f0e", "cpu": "#7f7f7f", "device": "#d62728"}


def latency(generation: dict) -> str | None:
    """Histograms of steady-state TTFT and per-token latency, one colour per mode."""
    if not generation:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, key, title in ((axes[0], "ttft_samples", "time to first token"),
                           (axes[1], "per_token_samples", "per-token latency")):
        for mode, data in generation.items():
            values = [v * 1e3 for shape in data["shapes"].values() for v in shape[key]]
            if values:
                ax.hist(values, bins=20, alpha=0.6, label=mode, color=COLORS.get(mode))
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_ylabel("requests" if key == "ttft_samples" else "tokens")
        ax.legend()
    return png(fig)


def loss_curves(finetune: dict) -> str | None:
    if not finetune or not finetune.get("device_loss"):
        return None
    fig, ax = plt.subplots(figsize=(6, 3.4))
    steps = range(1, len(finetune["cpu_loss"]) + 1)
    ax.plot(steps, finetune["cpu_loss"], "o-", color=COLORS["cpu"], label="CPU reference")
    ax.plot(steps, finetune["device_loss"], "x--", color=COLORS["device"], label="device")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("fine-tune loss")
    ax.legend()
    return png(fig)


def layer_errors(errors: list[float] | None) -> str | None:
    if not errors:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.bar(range(len(errors)), [max(e, 1e-12) for e in errors], color=COLORS["eager"])
    ax.set_xticks(range(len(errors)))
    ax.set_yscale("log")
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("max |device − CPU|")
    ax.set_title("error per layer (eager, floor 1e-12)")
    return png(fig)


def compile_vs_run(modes: dict) -> str | None:
    """Cold (compiling) first call vs steady-state call, per mode and shape."""
    bars = [(f"{mode}\nseq={length}", shape["cold"]["seconds"], shape["warm"]["seconds"])
            for mode, entry in modes.items() for length, shape in entry.get("shapes", {}).items()]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(bars)), 3.4))
    x = range(len(bars))
    ax.bar([i - 0.2 for i in x], [b[1] for b in bars], width=0.4, label="first call (cold, compiles)",
           color=COLORS["compile"])
    ax.bar([i + 0.2 for i in x], [b[2] for b in bars], width=0.4, label="second call (steady state)",
           color=COLORS["eager"])
    ax.set_xticks(list(x), [b[0] for b in bars])
    ax.set_ylabel("seconds")
    ax.set_title("compile vs run time (forward pass)")
    ax.legend()
    return png(fig)


def projected_vs_host(performance: dict) -> str | None:
    """Host-measured vs projected p50 latencies per mode and shape (log scale: they differ by orders)."""
    bars = [(f"{mode}\nseq={length}\n{what}", s[key]["p50"], s["projected"][key]["p50"])
            for mode, g in performance.get("generation", {}).items() for length, s in g["shapes"].items()
            if "projected" in s
            for key, what in (("ttft_seconds", "TTFT"), ("per_token_seconds", "per token"))
            if s[key]["p50"] and s["projected"][key]["p50"]]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(bars)), 3.4))
    x = range(len(bars))
    ax.bar([i - 0.2 for i in x], [b[1] * 1e3 for b in bars], width=0.4, label="host (measured)",
           color=COLORS["cpu"])
    ax.bar([i + 0.2 for i in x], [b[2] * 1e3 for b in bars], width=0.4, label="projected (Trainium)",
           color=COLORS["device"])
    ax.set_xticks(list(x), [b[0] for b in bars], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("ms (p50)")
    ax.set_title("projected vs host latency")
    ax.legend()
    return png(fig)


def projected_by_op(by_op: dict, top: int = 12) -> str | None:
    """Projected device seconds (kernel + launch) per op, the ``top`` largest and the rest."""
    if not by_op:
        return None
    totals = sorted(((op, r["kernel_seconds"] + r["launch_seconds"]) for op, r in by_op.items()),
                    key=lambda kv: -kv[1])
    shown = totals[:top] + ([("(other ops)", sum(s for _, s in totals[top:]))] if len(totals) > top else [])
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(shown) + 1.2))
    ax.barh([op for op, _ in shown][::-1], [s * 1e3 for _, s in shown][::-1], color=COLORS["device"])
    ax.set_xlabel("projected ms (kernel + launch overhead)")
    ax.set_title("projected device time per op (eager)")
    return png(fig)
