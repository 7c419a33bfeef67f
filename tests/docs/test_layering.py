"""The package layers hold as configured in `[tool.importlinter]` (pyproject.toml): import-linter
checks every layer of the contract, every package of torch_neuronx sits in one of them (a new
package left out would be unchecked), no wildcard hides an import, and ARCHITECTURE.md states
the same order."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "torch_neuronx"


def _contract() -> dict:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return contract


def _layers() -> list[set[str]]:
    """The configured layers, lowest first, each a set of package names."""
    return [{name.strip(" ()") for name in re.split(r"[|:]", layer)}
            for layer in reversed(_contract()["layers"])]


def test_every_package_sits_in_a_layer():
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    layered = set().union(*_layers())
    assert sorted(packages - layered) == [], "packages outside the layers contract"
    assert sorted(layered - packages) == [], "layers naming no package"


def test_no_import_is_ignored_but_the_extension_home():
    """A wildcard would hide a lower layer importing an upper one; only the module that
    imports the C++ extension (seen as an import of the root package) may reach the root."""
    assert _contract().get("ignore_imports", []) == ["torch_neuronx.runtime.extension -> torch_neuronx"]


def test_architecture_states_the_configured_order():
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    chain = re.search(r"\*\*Layers\.\*\* (.*?): a package imports only from layers to its (\w+)", text, re.S)
    assert chain, "ARCHITECTURE.md has no **Layers.** sentence"
    assert chain.group(2) == "left", "the chain is written lowest first: lower layers are to the left"
    stated = [{name.strip(" {}") for name in step.split(",")}
              for step in chain.group(1).replace("\n", " ").split("←")]
    assert stated == _layers()


def test_import_layers_contract_is_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), "import-linter is part of the test extra: pip install -e .[test]"
    proc = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 1 kept, 0 broken." in proc.stdout, proc.stdout
