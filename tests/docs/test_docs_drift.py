"""Lists in the docs that are data must match the code: the fast-path ops and the
ops routed to their CPU kernel instead of a decomposition (docs/device.md); the test files
tests/README.md maps and its "fast" tier, which must be the modules marked ``fast``; the README's
example, which must run as written. (The settings table is checked in test_settings.py.)"""
import ast
import re
from pathlib import Path

import pytest
import torch

import torch_neuronx

pytestmark = pytest.mark.fast

DEVICE_MD = Path(__file__).resolve().parents[2] / "docs" / "device.md"


def _documented(marker: str) -> set[str]:
    text = DEVICE_MD.read_text(encoding="utf-8")
    block = re.search(rf"<!-- {marker} -->(.*?)<!-- /{marker} -->", text, re.S)
    assert block, f"docs/device.md has no {marker} block"
    return set(re.findall(r"`([^`]+)`", block.group(1)))


def _qualified(name: str) -> str:
    return name if name.startswith("aten::") else f"aten::{name}"


def _privateuse1_registration(op: str) -> str | None:
    """Where the op's PrivateUse1 kernel was registered (file:line), if it has its own."""
    if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"):
        return None
    table = torch._C._dispatch_dump_table(op)
    found = re.search(r"^PrivateUse1: registered at (\S+) \[kernel\]", table, re.M)
    return found.group(1) if found else None


def test_fast_path_ops_match_the_docs():
    assert _documented("fast-path-ops") == set(torch_neuronx._C._fast_path_ops())


def test_bit_exact_ops_match_the_dispatcher():
    documented = {_qualified(n) for n in _documented("bit-exact-ops")}
    sites = set()
    for op in documented:
        # Each has CPU's kernel and a device-generic decomposition PyTorch would pick...
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU"), op
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeExplicitAutograd"), op
        # ...and a neuron kernel of its own, the route to the CPU kernel.
        site = _privateuse1_registration(op)
        assert site is not None, f"{op} has no PrivateUse1 kernel: it would decompose"
        sites.add(site)
    # Nothing else is registered where these are (the routing table), so the list is complete.
    routed = {
        op for op in torch._C._dispatch_get_all_op_names()
        if op.startswith("aten::") and _privateuse1_registration(op) in sites
    }
    assert routed == documented


def test_layer_norm_in_bfloat16_matches_cpu_bit_for_bit():
    x = torch.randn(4, 33, 64, dtype=torch.bfloat16)
    w, b = torch.randn(64, dtype=torch.bfloat16), torch.randn(64, dtype=torch.bfloat16)
    expected = torch.nn.functional.layer_norm(x, (64,), w, b)
    got = torch.nn.functional.layer_norm(x.to("neuron"), (64,), w.to("neuron"), b.to("neuron"))
    assert torch.equal(got.cpu(), expected)
    groups = torch.nn.functional.group_norm(x.to("neuron").transpose(1, 2), 8)
    assert torch.equal(groups.cpu(), torch.nn.functional.group_norm(x.transpose(1, 2), 8))


REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def _module_marks(path: Path) -> tuple[set[str], int]:
    """The marks of a test file's module-level ``pytestmark`` (``pytest.mark.NAME``) and how many
    ``mark.fast`` the file names anywhere (a second one would mark single tests)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            marks |= {n.attr for n in ast.walk(node.value)
                      if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"}
    uses = sum(isinstance(n, ast.Attribute) and n.attr == "fast" and isinstance(n.value, ast.Attribute)
               and n.value.attr == "mark" for n in ast.walk(tree))
    return marks, uses


def _tiers_of_the_tests_readme() -> dict[str, str]:
    """tests/README.md's tables: test file (repository path) -> its tier cell. A section
    titled with a backticked folder (`` `hf/` ``) lists file names relative to that folder."""
    tiers, folder = {}, "tests"
    for line in (TESTS / "README.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## (?:`(\w+)/`)?", line)
        if heading:
            folder = f"tests/{heading.group(1)}" if heading.group(1) else "tests"
            continue
        row = re.match(r"^\|\s*`([\w.]+\.py)`\s*\|.*\|\s*(\w*)\s*\|\s*$", line)
        if row:
            tiers[f"{folder}/{row.group(1)}"] = row.group(2)
    return tiers


def test_fast_tier_of_the_tests_readme_is_the_fast_marker():
    """`make test-fast` runs the tests marked ``fast`` (a whole module's ``pytestmark``, never a single
    test: the tier is per file); tests/README.md tells a newcomer which files those are."""
    tiers = _tiers_of_the_tests_readme()
    assert set(tiers.values()) <= {"", "fast"}, f"unknown tiers in tests/README.md: {tiers}"
    marked, stray = set(), []
    for path in TESTS.rglob("test_*.py"):
        marks, uses = _module_marks(path)
        if "fast" in marks:
            marked.add(str(path.relative_to(REPO)))
        if uses > ("fast" in marks):
            stray.append(str(path.relative_to(REPO)))
    assert stray == [], "pytest.mark.fast outside a module's pytestmark"
    assert {path for path, tier in tiers.items() if tier == "fast"} == marked


def test_tests_readme_maps_every_test_file():
    files = {str(p.relative_to(REPO)) for p in TESTS.rglob("test_*.py")}
    tiers = _tiers_of_the_tests_readme()
    assert sorted(files - set(tiers)) == [], "test files tests/README.md does not map"
    assert sorted(p for p in set(tiers) - files if not (REPO / p).is_file()) == [], \
        "tests/README.md maps files that do not exist"


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_example_runs_as_written(capsys, private_neff_cache):
    """The README's example is what a newcomer pastes first: it runs unchanged, and run again it
    compiles nothing new (the signatures its first run compiled are found), as its text says."""
    blocks = re.findall(r"^```python\n(.*?)^```", _readme(), re.S | re.M)
    assert len(blocks) == 1, "the README has one Python example"
    compiled = []
    for _ in range(2):
        exec(compile(blocks[0], "README.md example", "exec"), {"__name__": "readme_example"})
        loss_line, kernels_line = capsys.readouterr().out.strip().splitlines()
        assert re.fullmatch(r"loss \d+\.\d{3}, device memory \d+\.\d MiB", loss_line), loss_line
        compiled.append(int(kernels_line.rsplit(":", 1)[1]))
    assert compiled[0] > 0 and compiled[1] == compiled[0]


def test_readme_and_benchmarks_page_stay_short():
    """Read as a newcomer reads them: what it is and how to use it, not how it was measured."""
    assert len(_readme().splitlines()) <= 120
    assert len((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines()) <= 250
