"""Guard: ``torch_neuronx/projection/`` is the only owner of projected seconds and dollars.

Scans the source of ``torch_neuronx/`` and ``benchmarks/`` (outside ``projection/``) for
the three ways a projection gets rebuilt elsewhere: converting hours to seconds (the
literal 3600), multiplying or dividing by a price, and holding a compile-seconds constant.
Display arithmetic on results (tokens / seconds) is allowed; pricing is not.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
SCANNED = [ROOT / "torch_neuronx", ROOT / "benchmarks"]
OWNER = ROOT / "torch_neuronx" / "projection"
PRICE = re.compile(r"price|per_hour|usd_per", re.IGNORECASE)
COMPILE_NAME = re.compile(r"compile.*(seconds|_s$)|(seconds|_s)_per_(kernel|graph|op|program)", re.IGNORECASE)


def _modules() -> list[Path]:
    return sorted(p for base in SCANNED for p in base.rglob("*.py") if OWNER not in p.parents)


def _number(node) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def _names(node) -> str:
    """The identifiers an expression reads, joined (``p["usd_per_hour"]`` gives its key too)."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.append(sub.value)
    return " ".join(out)


def violations(source: str) -> list[str]:
    """What in ``source`` rebuilds a projected figure, one line each (line number first)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            if 3600 in (_number(node.left), _number(node.right)):
                found.append(f"{node.lineno}: converts hours to seconds (3600)")
            elif PRICE.search(_names(node.left)) or PRICE.search(_names(node.right)):
                found.append(f"{node.lineno}: multiplies or divides by a price")
            elif isinstance(node.op, ast.Mult) and (COMPILE_NAME.search(_names(node.left))
                                                    or COMPILE_NAME.search(_names(node.right))):
                found.append(f"{node.lineno}: scales a compile-seconds figure")
        targets = []
        if isinstance(node, ast.Assign):
            targets = [(t, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            targets = [(node.target, node.value)]
        for target, value in targets:
            if COMPILE_NAME.search(target.id) and _number(value):
                found.append(f"{node.lineno}: holds a compile-seconds constant {target.id} = {_number(value):g}")
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and COMPILE_NAME.search(node.args[0].value) \
                and any(_number(a) for a in node.args[1:]):
            found.append(f"{node.lineno}: declares {node.args[0].value} with a compile-seconds default")
    return found


@pytest.mark.parametrize("snippet, what", [
    ("cost = seconds * rate / 3600", "hours to seconds"),
    ("usd = run * p['usd_per_hour']", "price"),
    ("x = price_per_hour * hours", "price"),
    ("GRAPH_COMPILE_BASE_S = 2.0", "compile-seconds constant"),
    ("compile_seconds_per_kernel: float = 2.0", "compile-seconds constant"),
    ("_S('TORCHNEURON_COMPILE_SECONDS_PER_KERNEL', 'float', 2.0)", "compile-seconds default"),
    ("estimate = misses * acc.compile_seconds", "scales a compile-seconds figure"),
])
def test_the_guard_catches_each_way_of_rebuilding_a_projection(snippet, what):
    assert any(what in v for v in violations(snippet)), snippet


@pytest.mark.parametrize("snippet", [
    "tokens_per_second = tokens / seconds",
    "compile_seconds: float = 0.0",  # a host-timed field starting at zero
    "usd = price.usd(seconds)",  # the one conversion, owned by projection
    "per_million = usd * 1e6 / tokens",
])
def test_the_guard_lets_display_arithmetic_through(snippet):
    assert violations(snippet) == []


def test_no_module_outside_projection_rebuilds_projected_seconds_or_dollars():
    found = [f"{path.relative_to(ROOT)}:{v}" for path in _modules()
             for v in violations(path.read_text(encoding="utf-8"))]
    assert not found, "projected figures belong to torch_neuronx/projection/:\n" + "\n".join(found)
