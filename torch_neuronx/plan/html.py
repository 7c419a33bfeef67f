"""``plan.html``: the plan as one self-contained page in the pilot report's style
(its CSS, markup helpers and embedded matplotlib figures)."""
from __future__ import annotations

from pathlib import Path

from ..pilot.report.html import CSS
from ..pilot.report.markup import badge, e, img, num, table
from ..pilot.report.plots import plt, png

GiB = 2**30
TITLE = "<title>TorchNeuron plan</title>"  # how a rerun recognises a page it may replace


def _memory_chart(memory: dict) -> str:
    """One stacked bar of the rank's HBM by kind against the core's capacity."""
    fig, ax = plt.subplots(figsize=(7, 1.9))
    left = 0.0
    for kind, n in memory["bytes"].items():
        ax.barh(0, n / GiB, left=left, label=kind.replace("_", " "))
        left += n / GiB
    ax.axvline(memory["hbm_bytes"] / GiB, color="#c62828", linestyle="--", label="HBM of the core")
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


def render_html(plan: dict, json_name: str = "plan.json") -> str:
    lay, mem, t = plan["layout"], plan["memory"], plan["time"]
    status = "passed" if mem["fits"] else "failed"
    rows = [[e(k.replace("_", " ")), num(v / GiB, "{:.2f} GiB"), "assumed" if k == "runtime_reserve" else "emulated"]
            for k, v in mem["bytes"].items()]
    rows.append(["total / capacity", f"{mem['total_bytes'] / GiB:.2f} / {mem['hbm_bytes'] / GiB:.2f} GiB",
                 badge(status).replace(">passed<", ">fits<").replace(">failed<", ">does not fit<")])
    c = t["compile"]
    timing = [["distinct kernels (first run compiles)", num(c["eager_kernel_compiles"], "{:,}"), "emulated"],
              ["first-run compile time", num(c["first_run_compile_seconds"], "{:.0f} s"), "projected"],
              ["step: compute", num(t["compute_seconds"], "{:.3f} s"), "projected"]]
    timing += [[f"step: collectives over {e(link)}", num(s, "{:.3f} s"), "projected"]
               for link, s in t["collectives_by_link"].items()]
    timing += [["step time (no overlap … full overlap)",
                f"{t['step_seconds_no_overlap']:.3f} … {t['step_seconds_full_overlap']:.3f} s", "projected"],
               ["tokens/s (whole job)", num(t["tokens_per_second"], "{:,.0f}"), "projected"],
               ["MFU", num(t["mfu"], "{:.1%}"), "projected"],
               ["cost per step", num(t["usd_per_step"], "${:,.4f}"), "projected"],
               ["cost per billion tokens", num(t["usd_per_billion_tokens"], "${:,.2f}"), "projected"]]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>{TITLE}"
             f"<style>{CSS}</style></head><body>",
             f"<h1>TorchNeuron plan: {e(plan['model'])} {badge(status)}</h1>",
             f"<p class='muted'>{e(plan['model_type'])}, {plan['parameters']['total']:,} parameters · "
             f"{lay['instances']}×{e(plan['instance'])}, LNC={lay['lnc']} · {e(plan['mode'])} · "
             f"TP={lay['tp']} × FSDP={lay['fsdp']} = {lay['world']} ranks · batch {lay['batch']}/rank × "
             f"seq {plan['seq_len']} · {e(plan['dtype'])} · checkpointing "
             f"{'on' if lay['checkpointing'] else 'off'}</p>",
             f"<p class='banner'><b>Nothing here was measured on Trainium.</b> Memory and kernels are emulated "
             f"(traced on fake tensors: {e(plan['method'])}); times and costs are projected "
             f"(docs/projection.md).</p>",
             "<h2>HBM per rank</h2>", img(_memory_chart(mem), "HBM per rank"), table(["", "", "how"], rows)]
    if "suggestion" in plan:
        s = plan["suggestion"]
        parts.append(f"<p class='errorbox'>Smallest change that fits: {e(s['change']) if s else 'none found'}</p>")
    parts += ["<h2>Compilation, step time and cost</h2>", table(["", "", "how"], timing)]
    if plan.get("sweep"):
        parts.append("<h2>Sweep: fitting layouts, cheapest per token first (projected)</h2>")
        parts.append(table(["TP", "FSDP", "batch", "checkpointing", "HBM/rank", "step s", "tokens/s", "MFU",
                            "$ / B tokens"], [
            [str(r["layout"]["tp"]), str(r["layout"]["fsdp"]), str(r["layout"]["batch"]),
             "on" if r["layout"]["checkpointing"] else "off", num(r["memory_total_bytes"] / GiB, "{:.2f} GiB"),
             num(r["step_seconds"], "{:.3f}"), num(r["tokens_per_second"], "{:,.0f}"), num(r["mfu"], "{:.1%}"),
             num(r["usd_per_billion_tokens"], "${:,.2f}")] for r in plan["sweep"]]))
    parts.append(f"<p class='muted'>Machine-readable data: {e(json_name)} (same directory). See docs/plan.md.</p>"
                 "</body></html>")
    return "\n".join(parts)
