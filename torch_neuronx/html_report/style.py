"""The one stylesheet of the self-contained pages (pilot report, plan): inlined in each
page, so a page opens offline and the two tools look alike."""

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
