"""Every unit of the product and its tools stays small enough to hold one job: no module over 500
lines, no class over 250, no function over 80 (in torch_neuronx/, benchmarks/, tools/).

A size is the unit's span in the file, decorators, docstring and comments included (what a reader
scrolls through); a method counts towards its class and a nested function towards its function.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("torch_neuronx", "benchmarks", "tools")
LIMITS = {"module": 500, "class": 250, "function": 80}


def _sizes(path: Path, root: Path = REPO) -> list[tuple[str, str, int]]:
    """(kind, unit, lines) of the module at ``path`` and of every class and function in it."""
    text = path.read_text(encoding="utf-8")
    module = str(path.relative_to(root))
    found = [("module", module, len(text.splitlines()))]

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                found.append((kind, f"{module}::{prefix}{child.name}", child.end_lineno - start + 1))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(text, filename=module), "")
    return found


@pytest.fixture(scope="module")
def every_unit() -> list[tuple[str, str, int]]:
    return [unit for folder in FOLDERS for path in sorted((REPO / folder).rglob("*.py")) for unit in _sizes(path)]


def test_the_measure_counts_spans_with_decorators_methods_and_nested_functions(tmp_path):
    source = "import x\n\n@decorator\nclass A:\n    def f(self):\n        def g():\n            pass\n        return g\n"
    (tmp_path / "m.py").write_text(source)
    assert _sizes(tmp_path / "m.py", tmp_path) == [("module", "m.py", 8), ("class", "m.py::A", 6),
                                         ("function", "m.py::A.f", 4), ("function", "m.py::A.f.g", 2)]


def test_no_unit_is_over_its_limit(every_unit):
    over = [f"{kind} {unit}: {lines} lines (limit {LIMITS[kind]})"
            for kind, unit, lines in every_unit if lines > LIMITS[kind]]
    assert over == [], "split these at their seams:\n" + "\n".join(over)

