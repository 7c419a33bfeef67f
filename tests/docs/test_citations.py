"""Every citation can be checked from this repository or a public address (ARCHITECTURE.md, "How
the real product is cited"): no comment, doc or data source points at the project's private
research notes, which a reader of the repository does not have."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
THIS_FILE = str(Path(__file__).resolve().relative_to(REPO))  # it names the pattern it scans for
PRIVATE = re.compile(r"shared/research|RESEARCH §|notes §\d")


def test_no_citation_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert "torch_neuronx/projection/hardware.json" in tracked  # the scan reads the data files too
    offenders = [
        f"{name}:{n}"
        for name in tracked if name.endswith((".py", ".md", ".json", ".cpp", ".h", ".toml")) and name != THIS_FILE
        and (REPO / name).is_file()
        for n, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert offenders == []


# A tracker entry's number, however it is written: "issue 27", "Issue #27", "issues 18", "--issue27",
# "(#27)", "PR #27". Not a URL of a public tracker ("github.com/org/repo/issues/646": a path, which a
# reader can open), nor a "#" that numbers something else ("op result #0": no parentheses around it).
TRACKER_NUMBER = re.compile(r"\bissues?[ \t]*#?[ \t]*\d+|\(#\d+\)|\b(?:PR|pull request)[ \t]*#\d+", re.IGNORECASE)
# What is read: the product, its tools, tests, docs and examples, and the top-level documents.
SCANNED_FOLDERS = ("torch_neuronx", "benchmarks", "tools", "tests", "docs", "examples")
SCANNED_FILES = ("README.md", "ARCHITECTURE.md", "DEVELOPERS.md", "CHANGELOG.md", "Makefile", "setup.py", "pyproject.toml")
TEXT_SUFFIXES = (".py", ".md", ".json", ".cpp", ".h", ".toml", ".txt", ".cfg", ".yaml", ".yml", ".sh")


def _scanned_files() -> list[Path]:
    files = [REPO / name for name in SCANNED_FILES if (REPO / name).is_file()]
    for folder in SCANNED_FOLDERS:
        files += sorted(p for p in (REPO / folder).rglob("*")
                        if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts)
    return [p for p in files if p != Path(__file__).resolve()]


def test_tracker_number_pattern_catches_every_spelling_and_nothing_else():
    for text in ("see issue 27", "Issue #27's limits", "issues 18 and 25", "--issue27", "fixed (#27)",
                 "PR #12"):
        assert TRACKER_NUMBER.search(text), text
    for text in ("https://github.com/aws-neuron/aws-neuron-sdk/issues/646", "op result #0 must be ranked",
                 "tissue 3", "issue one matmul per tile", "asynchronous, as FSDP issues them"):
        assert not TRACKER_NUMBER.search(text), text


def test_no_file_names_a_tracker_number():
    """The product states behaviour and its reason; a number in a private tracker is a reference no
    reader can follow (history lives in git)."""
    offenders = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}"
        for path in _scanned_files()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if TRACKER_NUMBER.search(line)
    ]
    assert offenders == []
