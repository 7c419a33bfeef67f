"""The package layers (runtime <- neuron <- compile/distributed/fidelity <- tools)
hold: import-linter checks the contract in pyproject.toml."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_layers_contract_is_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), "import-linter is part of the test extra: pip install -e .[test]"
    proc = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
