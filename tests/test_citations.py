"""Every citation can be checked from this repository or a public address (ARCHITECTURE.md, "How
the real product is cited"): no comment, doc or data source points at the project's private
research notes, which a reader of the repository does not have."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"shared/research|RESEARCH §|notes §\d")


def test_no_citation_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert "torch_neuronx/projection/hardware.json" in tracked  # the scan reads the data files too
    offenders = [
        f"{name}:{n}"
        for name in tracked if name.endswith((".py", ".md", ".json", ".cpp", ".h", ".toml")) and name != "tests/test_citations.py"
        and (REPO / name).is_file()
        for n, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert offenders == []
