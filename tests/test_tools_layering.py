"""The tools layer (pilot, coverage, cli, testing) may import the core; the core never imports the tools."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torch_neuronx"
TOOLS = ("pilot", "coverage", "cli", "testing")


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of every module ``source`` (a module of ``package``) imports, relative ones resolved."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _is_tool(module: str) -> bool:
    return any(module == f"torch_neuronx.{t}" or module.startswith(f"torch_neuronx.{t}.") for t in TOOLS)


def test_relative_imports_are_resolved():
    names = imported_modules("from ..pilot import config\nfrom . import profiles\nimport torch_neuronx.cli\n",
                             "torch_neuronx.runtime")
    assert {"torch_neuronx.pilot.config", "torch_neuronx.runtime.profiles", "torch_neuronx.cli"} <= names
    assert _is_tool("torch_neuronx.pilot.config") and not _is_tool("torch_neuronx.pilotage")


def test_the_core_never_imports_the_tools_layer():
    core = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in TOOLS]
    assert len(core) > 20  # the scan sees the core packages
    offenders = {}
    for path in core:
        package = ".".join(path.relative_to(PACKAGE.parent).parts[:-1])
        bad = sorted(m for m in imported_modules(path.read_text(), package) if _is_tool(m))
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = bad
    assert offenders == {}
