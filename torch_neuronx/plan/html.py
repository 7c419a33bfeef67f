"""``plan.html``: the plan as one self-contained page in the pilot report's style
(the shared stylesheet, markup helpers and embedded matplotlib figures of ``html_report/``)."""
from __future__ import annotations

from pathlib import Path

from ..html_report.figures import plt, png
from ..html_report.markup import badge, e, img, table
from ..html_report.style import CSS
from .planner import Plan
from .render import band_note, headline, layout_notes, memory_rows, time_rows, verdict
from .sweep_table import cells, columns, title

GiB = 2**30
TITLE = "<title>TorchNeuron plan</title>"  # how a rerun recognises a page it may replace


def _memory_chart(memory) -> str:
    """One stacked bar of the rank's HBM by kind against the core's capacity."""
    fig, ax = plt.subplots(figsize=(7, 1.9))
    left = 0.0
    for kind, n in memory.bytes.items():
        ax.barh(0, n / GiB, left=left, label=kind.replace("_", " "))
        left += n / GiB
    ax.axvline(memory.hbm_bytes / GiB, color="#c62828", linestyle="--", label="HBM of the core")
    ax.set_yticks([])
    ax.set_xlabel("GiB per rank (emulated; runtime reserve assumed)")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return png(fig)


def is_plan_page(path: Path) -> bool:
    """Whether ``path`` is a page written by ``torchneuron plan`` (which a rerun may replace)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.startswith("<!doctype html>") and TITLE in head


def render_html(plan: Plan, json_name: str = "plan.json") -> str:
    mem = plan.memory
    status = "passed" if mem.fits else "failed"
    verdict_badge = badge(status).replace(">passed<", ">fits<").replace(">failed<", ">does not fit<")
    rows = [[e(f), e(v), verdict_badge if f.startswith("HBM: total") else e(how)] for f, v, how in memory_rows(plan)]
    timing = [[e(f), e(v), e(how)] for f, v, how in time_rows(plan)]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>{TITLE}"
             f"<style>{CSS}</style></head><body>",
             f"<h1>TorchNeuron plan: {e(plan.job.model)} {badge(status)}</h1>"]
    if not plan.fits:
        parts.append(f"<p class='errorbox'>{e(verdict(plan))}</p>")
    parts += [f"<p class='muted'>{e(headline(plan))}</p>",
              "".join(f"<p class='muted'>{e(line)}</p>" for line in layout_notes(plan)),
              f"<p class='banner'><b>Nothing here was measured on Trainium.</b> Memory and kernels are emulated "
              f"(traced on fake tensors: {e(plan.method)}); times and costs are projected "
              f"(docs/projection.md). {e(band_note(plan))}</p>",
              "<h2>HBM per rank</h2>", img(_memory_chart(mem), "HBM per rank"), table(["", "", "how"], rows),
              "<h2>Compilation, time and cost" + ("" if plan.fits else " (as if it fit)") + "</h2>",
              table(["", "", "how"], timing)]
    if plan.sweep:
        kind = "train" if plan.job.mode == "train" else plan.kind
        parts.append(f"<h2>Sweep: {e(title(kind))}</h2>")
        parts.append(table(list(columns(kind)), [cells(kind, r) for r in plan.sweep]))
    parts.append(f"<p class='muted'>Machine-readable data: {e(json_name)} (same directory). See docs/plan.md.</p>"
                 "</body></html>")
    return "\n".join(parts)
