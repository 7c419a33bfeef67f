"""``report.html``: one self-contained page (inline CSS, base64 plots, no scripts, no network).

The frame (header, overview, summary table) is here; each step module renders its own section.
"""
from __future__ import annotations

from ...html_report.markup import badge, e, num, table
from ...html_report.style import CSS
from ..steps import STEPS


def _checks(step: dict) -> str:
    if not step["checks"]:
        return ""
    rows = [[badge("passed" if c["passed"] else "failed"), e(c["name"]), num(c.get("value")),
             num(c.get("limit")), e(c.get("detail", ""))] for c in step["checks"]]
    return table(["", "check", "value", "limit", "detail"], rows)


def render_html(report: dict) -> str:
    """The page for a report as written to report.json (so an old report.json can be re-rendered)."""
    env, model, cfg = report["environment"], report.get("model") or {}, report["config"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>TorchNeuron pilot report</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>TorchNeuron pilot report {badge(report['status'])}</h1>",
             f"<p class='muted'>schema {e(report['schema'])} v{e(report['schema_version'])} · "
             f"{e(report['created_utc'])} · {report['duration_seconds']:.1f}s · exit code {report['exit_code']} · "
             f"torchneuron {e(report['tool']['torchneuron'])}, torch {e(report['tool']['torch'])}, "
             f"transformers {e(report['tool']['transformers'])}</p>"]
    if env["emulated"]:
        parts.append(f"<p class='banner'><b>Emulated device.</b> {e(env['time_basis'])}.</p>")
    if report["error"]:
        parts.append(f"<p class='errorbox'><b>{e(report['error']['kind'])}:</b> {e(report['error']['message'])}</p>")
    inst = env.get("instance") or {}
    overview = [["model", e(model.get("source", "–"))], ["architecture", e(model.get("architecture", "–"))],
                ["parameters", num(model.get("parameters"), "{:,}")], ["device", e(env["device"])],
                ["instance", e(inst.get("name", "–"))], ["dtype", e(cfg["dtype"])], ["mode", e(cfg["mode"])],
                ["attention", e(cfg["attn_implementation"])]]
    parts.append(table(["", ""], overview))
    s = report["summary"]
    parts.append(f"<h2>Summary: {s['checks_passed']}/{s['checks_total']} checks passed</h2>")
    parts.append(table(["step", "status", "seconds", "result"], [
        [f"<a href='#{name}'>{e(step['title'])}</a>", badge(step["status"]), num(step["seconds"], "{:.1f}"),
         e(step["summary"])] for name, step in report["steps"].items()]))
    for name, step in report["steps"].items():
        parts.append(f"<h2 id='{name}'>{e(step['title'])} {badge(step['status'])}</h2>")
        parts.append(f"<p>{e(step['summary'])}</p>")
        parts.append(_checks(step))
        parts.append(STEPS[name].html(step["data"]))
        for err in step["data"].get("errors", []) if isinstance(step["data"], dict) else []:
            parts.append(f"<p class='errorbox'>{e(err['where'])}: {e(err['message'])}</p>")
    parts.append("<p class='muted'>Machine-readable data: report.json (same directory). "
                 "Schema: docs/pilot.md.</p></body></html>")
    return "\n".join(parts)
