"""Small HTML builders (escaped text, badges, tables, embedded figures) of the pilot report
and the plan page."""
from __future__ import annotations

import html


def e(value) -> str:
    """Escaped text."""
    return html.escape(str(value))


def badge(status: str) -> str:
    return f'<span class="badge {e(status)}">{e(status.replace("_", " "))}</span>'


def num(value, fmt: str = "{:.4g}", scale: float = 1.0) -> str:
    if value is None:
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value * scale if scale != 1.0 else value)
    return e(value)


def table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def img(b64: str | None, alt: str) -> str:
    return f'<img alt="{e(alt)}" src="data:image/png;base64,{b64}">' if b64 else ""
