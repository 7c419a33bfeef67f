"""``report.html``: one self-contained page (inline CSS, base64 plots, no scripts, no network)."""
from __future__ import annotations

import html

from . import plots

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;color:#1d1d1f;padding:0 16px}
h1{margin-bottom:4px}h2{margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0 16px 0;font-size:14px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600;font-size:13px}
.passed{background:#2e7d32}.failed,.error{background:#c62828}.skipped,.not_run{background:#9e9e9e}
.not_available{background:#ef6c00}.banner{background:#fff8e1;border:1px solid #ffcc80;padding:8px 12px;border-radius:6px}
.errorbox{background:#ffebee;border:1px solid #ef9a9a;padding:8px 12px;border-radius:6px}
.muted{color:#666;font-size:13px}img{max-width:100%;border:1px solid #eee;margin:6px 0}
code,pre{background:#f5f5f7;padding:1px 4px;border-radius:4px;font-size:13px}pre{padding:8px;white-space:pre-wrap}
"""


def _e(value) -> str:
    return html.escape(str(value))


def _badge(status: str) -> str:
    return f'<span class="badge {_e(status)}">{_e(status.replace("_", " "))}</span>'


def _num(value, fmt: str = "{:.4g}", scale: float = 1.0) -> str:
    if value is None:
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value * scale if scale != 1.0 else value)
    return _e(value)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(b64: str | None, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{b64}">' if b64 else ""


def _checks(step: dict) -> str:
    if not step["checks"]:
        return ""
    rows = [[_badge("passed" if c["passed"] else "failed"), _e(c["name"]), _num(c.get("value")),
             _num(c.get("limit")), _e(c.get("detail", ""))] for c in step["checks"]]
    return _table(["", "check", "value", "limit", "detail"], rows)


def _inputs(data: dict) -> str:
    if not data:
        return ""
    prompts = "".join(f"<li><code>{_e(p[:160])}</code></li>" for p in data.get("prompts", []))
    return (f"<p>Tokenizer: {_e(data.get('tokenizer'))}; batch {_e(data.get('batch_size'))} × lengths "
            f"{_e(data.get('seq_lens'))}; file <code>{_e(data.get('file'))}</code>.</p><ol>{prompts}</ol>")


def _numerics(data: dict) -> str:
    rows = [[_e(mode), _e(length), _num(e["max_abs_error"]), _num(e["max_rel_error"]), _num(e["mean_abs_error"]),
             _badge("passed" if e["within_tolerance"] else "failed")]
            for mode, d in data.items() if isinstance(d, dict) and "logits" in d for length, e in d["logits"].items()]
    out = _table(["mode", "seq len", "max abs error", "max rel error", "mean abs error", "tolerance"], rows) if rows else ""
    layers = data.get("eager", {}).get("per_layer_max_abs_error")
    return out + _img(plots.layer_errors(layers), "error per layer")


def _quality(data: dict) -> str:
    out = []
    for mode, g in data.get("generation", {}).items():
        rows = [[_e(i), _e(div if div is not None else "none"), f"<code>{_e(ct)}</code><br><code>{_e(c)}</code>",
                 f"<code>{_e(dt)}</code><br><code>{_e(d)}</code>"]
                for i, (div, c, d, ct, dt) in enumerate(zip(g["first_divergence"], g["cpu_text"], g["device_text"],
                                                            g["cpu_tokens"], g["device_tokens"]))]
        out.append(f"<h3>Greedy generation ({_e(mode)}): {g['token_agreement']:.0%} of tokens match CPU</h3>")
        out.append(_table(["row", "first divergence", "CPU continuation (ids, text)",
                           "device continuation (ids, text)"], rows))
    ppl = data.get("perplexity")
    if ppl:
        out.append(_table(["", "loss", "perplexity"], [
            ["CPU", _num(ppl["cpu_loss"], "{:.6f}"), _num(ppl["cpu_perplexity"], "{:.3f}")],
            ["device", _num(ppl["device_loss"], "{:.6f}"), _num(ppl["device_perplexity"], "{:.3f}")]]))
        out.append(f'<p class="muted">On the {ppl["tokens"]}-token built-in text. A randomly initialised model has a '
                   "perplexity near its vocabulary size; what matters is that device and CPU agree.</p>")
    return "".join(out)


def _finetune(data: dict) -> str:
    if not data:
        return ""
    return (f"<p>{_e(data['steps'])} steps of {_e(data['optimizer'])}, batch {_e(data['batch_size'])} × "
            f"{_e(data['seq_len'])} tokens; {data['train_samples_per_second']:.2f} samples/s on the device.</p>"
            + _img(plots.loss_curves(data), "loss curves"))


def _checkpoint(data: dict) -> str:
    if not data:
        return ""
    return _table(["", ""], [[_e(k), _num(v)] for k, v in data.items() if k != "errors"])


def _compilation(data: dict) -> str:
    out = []
    for mode, entry in data.get("modes", {}).items():
        if not entry.get("available", True):
            out.append(f"<p><b>{_e(mode)}</b>: not available — {_e(entry.get('reason'))}</p>")
            continue
        fresh = data.get("fresh_process", {}).get(mode, {}).get("first_call_seconds", {})
        rows = [[_e(length), _num(s["cold"]["seconds"], "{:.3f}"), _num(s["warm"]["seconds"], "{:.4f}"),
                 _num(fresh.get(length), "{:.3f}"), _num(s["cold"]["kernel_compilations"]),
                 _num(s["cold"]["kernel_disk_hits"]), _num(s["cold"]["estimated_compile_seconds"], "{:.1f}"),
                 _num(s["cold"]["new_graphs"])]
                for length, s in entry.get("shapes", {}).items()]
        out.append(f"<h3>{_e(mode)}" + (f" (backend {_e(entry['backend'])})" if entry.get("backend") else "") + "</h3>")
        out.append(_table(["seq len", "cold first call s", "steady call s", "fresh process first call s",
                           "kernel compilations (eager)", "NEFF cache disk hits", "estimated neuronx-cc s",
                           "new graphs (compile)"], rows))
        dyn = (entry.get("dynamo") or {}).get("neuron_backend") or {}
        if dyn.get("available"):
            out.append(_table(["graphs", "recompilations", "graph breaks", "compile s", "execution s",
                               "cache hits", "cache misses"],
                              [[_num(dyn.get(k)) for k in ("graphs_compiled", "recompilations", "graph_breaks",
                                                           "compile_seconds", "execution_seconds", "cache_hits",
                                                           "cache_misses")]]))
            for r in dyn.get("recompile_reasons", []):
                out.append(f"<p class='muted'>recompile {_e(r['compile_id'])}: {_e(r['reason'])}</p>")
            for b in dyn.get("graph_break_reasons", []):
                out.append(f"<p class='muted'>graph break {_e(b['compile_id'])}: {_e(b['reason'])}</p>")
        fid = entry.get("fidelity") or {}
        if fid.get("available") is False:
            out.append(f"<p class='muted'>per-shape compilation accounting: not available — {_e(fid.get('reason'))}</p>")
    out.append("<p class='muted'>On the emulator a first call costs little more than a steady one, because "
               "kernels are not really compiled; the projected Trainium compile time is the estimate column "
               "(fidelity layer: misses × an assumed per-kernel neuronx-cc time). In compile mode the graph "
               "compiler really runs, so its cold calls are real compile time.</p>")
    out.append(_img(plots.compile_vs_run(data.get("modes", {})), "compile vs run time"))
    return "".join(out)


def _performance(data: dict) -> str:
    out = []
    rows = []
    for mode, g in data.get("generation", {}).items():
        for length, s in g["shapes"].items():
            t, p = s["ttft_seconds"], s["per_token_seconds"]
            rows.append([_e(mode), _e(length), _e(s["batch_size"])]
                        + [_num(t[k], "{:.2f}", 1e3) for k in ("p50", "p95", "p99")]
                        + [_num(p[k], "{:.2f}", 1e3) for k in ("p50", "p95", "p99")]
                        + [_num(s["prefill_tokens_per_second"], "{:.0f}"), _num(s["decode_tokens_per_second"], "{:.0f}"),
                           _num(s["cold_ttft_seconds"], "{:.3f}")])
    if rows:
        out.append(_table(["mode", "seq len", "batch", "TTFT p50 ms", "p95", "p99", "per-token p50 ms", "p95", "p99",
                           "prefill tok/s", "decode tok/s", "cold TTFT s"], rows))
    mem_rows = []
    for key, label in (("inference_memory", "inference"), ("training_memory", "fine-tune")):
        m = data.get(key)
        if m:
            mem_rows.append([label, _e(m["scope"]), _num(m["peak_bytes"], "{:.1f}", 2**-20),
                             _num(m["capacity_bytes"], "{:.1f}", 2**-30), _num(m["peak_fraction"], "{:.4%}")])
    if mem_rows:
        out.append(_table(["phase", "scope", "peak MiB", "capacity GiB", "peak / capacity"], mem_rows))
    if data.get("train_samples_per_second") is not None:
        out.append(f"<p>Training throughput: {data['train_samples_per_second']:.2f} samples/s.</p>")
    out.append(_img(plots.latency(data.get("generation", {})), "latency distribution"))
    return "".join(out)


def _cost(data: dict) -> str:
    if not data:
        return ""
    out = [f'<p class="banner">{_e(data.get("time_basis", ""))}. Price: '
           f'{_num(data.get("price_per_hour_usd"), "${:.2f}/h")} ({_e(data.get("price_source"))}).</p>']
    rows = [[_e(mode), _e(j["job"]), _num(j["seconds"], "{:.4f}"), _num(j["cost_usd"], "${:.8f}"),
             _num(j["cost_per_million_tokens_usd"], "${:.4f}")] for mode, j in data.get("generation", {}).items()]
    if rows:
        out.append(_table(["mode", "job", "seconds", "cost per job", "per 1M generated tokens"], rows))
    ft = data.get("finetune")
    if ft:
        out.append(_table(["job", "seconds", "cost"], [[_e(ft["job"]), _num(ft["seconds"], "{:.3f}"),
                                                        _num(ft["cost_usd"], "${:.8f}")]]))
    co = data.get("compile_overhead") or {}
    out.append(_table(["compile overhead", "seconds", "cost"], [
        ["measured cold-call overhead (this run)", _num(co.get("measured_cold_seconds"), "{:.2f}"),
         _num(co.get("measured_cold_cost_usd"), "${:.8f}")],
        ["projected neuronx-cc time, this run's cache misses (fidelity estimate)",
         _num(co.get("estimated_neuronx_cc_seconds"), "{:.1f}"), _num(co.get("estimated_neuronx_cc_cost_usd"), "${:.8f}")],
        ["projected neuronx-cc time with an empty NEFF cache (upper bound)",
         _num(co.get("estimated_empty_cache_seconds"), "{:.1f}"),
         _num(co.get("estimated_empty_cache_cost_usd"), "${:.8f}")]]))
    return "".join(out)


SECTIONS = {"inputs": _inputs, "numerics": _numerics, "quality": _quality, "finetune": _finetune,
            "checkpoint": _checkpoint, "compilation": _compilation, "performance": _performance, "cost": _cost}


def render_html(report: dict) -> str:
    env, model, cfg = report["environment"], report.get("model") or {}, report["config"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>TorchNeuron pilot report</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>TorchNeuron pilot report {_badge(report['status'])}</h1>",
             f"<p class='muted'>schema {_e(report['schema'])} v{_e(report['schema_version'])} · "
             f"{_e(report['created_utc'])} · {report['duration_seconds']:.1f}s · exit code {report['exit_code']} · "
             f"torchneuron {_e(report['tool']['torchneuron'])}, torch {_e(report['tool']['torch'])}, "
             f"transformers {_e(report['tool']['transformers'])}</p>"]
    if env["emulated"]:
        parts.append(f"<p class='banner'><b>Emulated device.</b> {_e(env['time_basis'])}.</p>")
    if report["error"]:
        parts.append(f"<p class='errorbox'><b>{_e(report['error']['kind'])}:</b> {_e(report['error']['message'])}</p>")
    inst = env.get("instance") or {}
    overview = [["model", _e(model.get("source", "–"))], ["architecture", _e(model.get("architecture", "–"))],
                ["parameters", _num(model.get("parameters"), "{:,}")], ["device", _e(env["device"])],
                ["instance", _e(inst.get("name", "–"))], ["dtype", _e(cfg["dtype"])], ["mode", _e(cfg["mode"])],
                ["attention", _e(cfg["attn_implementation"])]]
    parts.append(_table(["", ""], overview))
    s = report["summary"]
    parts.append(f"<h2>Summary: {s['checks_passed']}/{s['checks_total']} checks passed</h2>")
    parts.append(_table(["step", "status", "seconds", "result"], [
        [f"<a href='#{name}'>{_e(step['title'])}</a>", _badge(step["status"]), _num(step["seconds"], "{:.1f}"),
         _e(step["summary"])] for name, step in report["steps"].items()]))
    for name, step in report["steps"].items():
        parts.append(f"<h2 id='{name}'>{_e(step['title'])} {_badge(step['status'])}</h2>")
        parts.append(f"<p>{_e(step['summary'])}</p>")
        parts.append(_checks(step))
        parts.append(SECTIONS[name](step["data"]))
        for err in step["data"].get("errors", []) if isinstance(step["data"], dict) else []:
            parts.append(f"<p class='errorbox'>{_e(err['where'])}: {_e(err['message'])}</p>")
    parts.append("<p class='muted'>Machine-readable data: report.json (same directory). "
                 "Schema: docs/pilot.md.</p></body></html>")
    return "\n".join(parts)
