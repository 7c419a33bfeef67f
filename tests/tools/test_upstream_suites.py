"""``python -m tools.upstream``: sources, shims, the per-device child runs and the side-by-side table.

The runner is checked on a tiny generated suite run for real on both devices
(one child interpreter each); the sources on a generated sdist and a git
repository made here, so nothing is downloaded.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tools.upstream import __main__ as cli
from tools.upstream import shims, sources, table
from tools.upstream.run import prepare_suite_dir, run_target
from tools.upstream.selection import Target, parse

FAKE_SUITE = '''
import importlib.util
import os
import time

import pytest
import torch

DEVICE = os.environ["TRANSFORMERS_TEST_DEVICE"]


def test_add_matches():
    x = torch.arange(4.0, device=DEVICE)
    assert (x + x).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_assumes_cpu():
    assert torch.ones(1, device=DEVICE).device.type == "cpu", f"tensor is on {DEVICE}\\nsecond line"


@pytest.mark.skipif(DEVICE == "cpu", reason="needs an accelerator")
def test_accelerator_only():
    assert torch.ones(1, device=DEVICE).device.type == "neuron"


def test_neuron_visible_only_on_neuron():
    assert (importlib.util.find_spec("torch_neuronx") is None) == (DEVICE == "cpu")


def test_broken_everywhere():
    raise ValueError("wrapped error raised:\\nValueError: the cause")


def test_hangs_on_neuron():
    if DEVICE == "neuron":
        time.sleep(600)
'''


_started: dict = {}


def start_early(fixtures: set[str]) -> None:
    """The fake suite run on cpu and on neuron, both in the background. conftest.py calls this
    once collection is done: the neuron run waits out its one-minute timeout idle (its last
    test hangs), and that minute then passes while the tests before this file run. The pool's
    threads are joined at interpreter exit, so no child outlives the session."""
    if "fake_report" not in fixtures:
        return
    root = Path(tempfile.mkdtemp(prefix="torchneuron-fake-suite-"))
    (root / "tests").mkdir()
    (root / "tests" / "test_fake.py").write_text(FAKE_SUITE)
    prepare_suite_dir(root)
    target = Target("fake", "tests/test_fake.py")
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fake-suite")
    runs = {device: pool.submit(run_target, target, device, root, root / "runs", timeout=60, test_timeout=300)
            for device in ("cpu", "neuron")}
    pool.shutdown(wait=False)
    _started.update(root=root, target=target, runs=runs)


@pytest.fixture(scope="module")
def fake_report():
    """The side-by-side report of the fake suite's two runs."""
    if not _started:  # a run that did not go through conftest.py's collection hook
        start_early({"fake_report"})
    root, target = _started["root"], _started["target"]
    try:
        runs = {device: run.result(timeout=600) for device, run in _started["runs"].items()}
        entry = {"library": "fake", "target": target.label,
                 "devices": {d: {"status": r.status, "seconds": r.seconds, "records": r.records}
                             for d, r in runs.items()}}
        report = {"date": "today", "host": "this host", "sources": {}, "shims": [], "tests": {}}
        report.update(table.compare([entry]))
        report["_runs"] = (root, target, runs)
        yield report
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_message_ending_in_a_colon_keeps_its_next_line(fake_report):
    _, _, runs = fake_report["_runs"]
    outcomes = table.final_outcomes(runs["cpu"].records)
    assert outcomes["tests/test_fake.py::test_broken_everywhere"] == (
        "failed", "ValueError: wrapped error raised: ValueError: the cause")


def test_resume_reuses_a_finished_run_without_running(fake_report):
    root, target, runs = fake_report["_runs"]
    again = run_target(target, "neuron", root, root / "runs", timeout=0.001, test_timeout=1, resume=True)
    assert (again.status, again.seconds, again.records) == ("timeout", runs["neuron"].seconds, runs["neuron"].records)


def test_counts_per_device(fake_report):
    row = fake_report["rows"][0]
    cpu, neuron = row["devices"]["cpu"], row["devices"]["neuron"]
    assert (cpu["passed"], cpu["failed"], cpu["skipped"], cpu["status"]) == (4, 1, 1, "completed")
    # The neuron run was killed in test_hangs_on_neuron: it keeps the five outcomes it had.
    assert (neuron["passed"], neuron["failed"], neuron["skipped"], neuron["status"]) == (3, 2, 0, "timeout")


def test_cpu_pass_neuron_fail_with_first_error_line(fake_report):
    lost = {r["test"].split("::")[-1]: r for r in fake_report["cpu_pass_neuron_fail"]}
    assert set(lost) == {"test_assumes_cpu", "test_hangs_on_neuron"}
    assert lost["test_assumes_cpu"]["neuron"] == "failed"
    assert lost["test_assumes_cpu"]["error"] == "AssertionError: tensor is on neuron"
    assert lost["test_hangs_on_neuron"] == {"library": "fake", "target": "tests/test_fake.py",
                                            "test": "tests/test_fake.py::test_hangs_on_neuron",
                                            "neuron": "not run", "error": "not run: the file's run timeout"}
    assert fake_report["rows"][0]["cpu_pass_neuron_fail"] == 2
    assert [e["test"].split("::")[-1] for e in fake_report["skipped_on_cpu_passed_on_neuron"]] == [
        "test_accelerator_only"]


def test_markdown_table(fake_report):
    markdown = table.to_markdown(fake_report)
    assert "| fake | `tests/test_fake.py` | 4 / 1 / 1 | 3 / 2 / 0 (timeout) | 2 |" in markdown
    assert "| `tests/test_fake.py::test_assumes_cpu` | failed | AssertionError: tensor is on neuron |" in markdown
    assert "Skipped on cpu (accelerator-only), passed on neuron: 1: `test_accelerator_only`" in markdown
    assert "**host measurements**" in markdown


def test_merge_and_docs_block(fake_report, tmp_path):
    renamed = json.loads(json.dumps({k: v for k, v in fake_report.items() if k != "_runs"}).replace(
        '"fake"', '"other"'))
    merged = table.merge([fake_report, renamed])
    assert merged["totals"]["cpu"] == {"passed": 8, "failed": 2, "skipped": 2}
    assert len(merged["cpu_pass_neuron_fail"]) == 4
    # The same file run again in a later report replaces the earlier row.
    assert table.merge([fake_report, renamed, fake_report])["rows"] == merged["rows"][1:] + merged["rows"][:1]
    assert len(table.merge([fake_report, fake_report])["cpu_pass_neuron_fail"]) == 2
    docs = tmp_path / "doc.md"
    docs.write_text(f"intro\n{cli.BEGIN}\nold table\n{cli.END}\noutro\n")
    cli.replace_docs_block(docs, "new table\n")
    assert docs.read_text() == f"intro\n{cli.BEGIN}\nnew table\n{cli.END}\noutro\n"
    docs.write_text("no markers")
    with pytest.raises(SystemExit, match="no <!-- upstream-suites:begin -->"):
        cli.replace_docs_block(docs, "x")


def test_worst_phase_wins_and_xfail_is_skipped():
    records = [
        {"nodeid": "a", "when": "call", "outcome": "passed", "message": ""},
        {"nodeid": "a", "when": "teardown", "outcome": "failed", "message": "RuntimeError: teardown"},
        {"nodeid": "b", "when": "call", "outcome": "skipped", "xfail": True, "message": "AssertionError"},
        {"nodeid": "c", "when": "setup", "outcome": "skipped", "message": "Skipped: needs cuda"},
    ]
    assert table.final_outcomes(records) == {"a": ("failed", "RuntimeError: teardown"),
                                             "b": ("skipped", "AssertionError"),
                                             "c": ("skipped", "Skipped: needs cuda")}


def test_shims_apply_carry_and_refuse_when_stale(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("from x import (\n    A,\n    B,\n)\nuse(B)\n")
    (tmp_path / "lib.py").write_text("import os\nB = {'k': 1,\n     'j': 2}\nC = 3\n")
    carry = shims.Shim("lib", "tests/t.py", "    B,\n", "", "B moved", carry=("lib.py", "B"))
    assert shims.apply("lib", tmp_path, (carry,)) == [carry]
    text = (tmp_path / "tests" / "t.py").read_text()
    assert text.startswith("from x import (\n    A,\n)\n") and text.endswith("B = {'k': 1,\n     'j': 2}\n")
    assert shims.apply("other", tmp_path, (carry,)) == []
    with pytest.raises(shims.ShimError, match="stale"):
        shims.apply("lib", tmp_path, (carry,))  # its text is gone now


def test_every_listed_shim_says_why():
    assert all(s.why.strip() for s in shims.SHIMS + shims.EVIDENCE)
    assert {s.library for s in shims.SHIMS + shims.EVIDENCE} <= set(sources.LIBRARIES)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_snapshot_then_sdist_overlay(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "tests" / "models" / "m").mkdir(parents=True)
    (repo / "tests" / "common.py").write_text("snapshot common")
    (repo / "tests" / "models" / "m" / "test_m.py").write_text("snapshot model test")
    (repo / "VERSION").write_text("1.2.0.dev0\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    lib = sources.Library("fakelib", True, ("tests/*.py",), ("VERSION", r"(\S+)"), "someone/fakelib")
    monkeypatch.setattr(sources.Library, "installed_version", property(lambda self: "1.3.0"))
    cache = tmp_path / "sdists"
    cache.mkdir()
    with tarfile.open(cache / "fakelib-1.3.0.tar.gz", "w:gz") as tar:
        data = b"sdist common"
        info = tarfile.TarInfo("fakelib-1.3.0/tests/common.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    dest = tmp_path / "suite"
    provenance = sources.obtain(lib, ["tests/models/m/test_m.py"], dest, cache, (repo / ".git", "HEAD"))
    assert (dest / "tests" / "common.py").read_text() == "sdist common"  # the installed version wins
    assert (dest / "tests" / "models" / "m" / "test_m.py").read_text() == "snapshot model test"
    assert provenance["snapshot"]["version"] == "1.2.0.dev0"
    assert provenance["sdist"] == {"kind": "sdist", "file": "fakelib-1.3.0.tar.gz", "version": "1.3.0", "files": 1}
    with pytest.raises(sources.SourceError, match="--snapshot fakelib=GIT_DIR"):
        sources.obtain(lib, ["tests/models/m/test_m.py"], tmp_path / "again", cache, None)
    with pytest.raises(sources.SourceError, match="no test file tests/missing.py"):
        sources.obtain(lib, ["tests/missing.py"], tmp_path / "third", cache, (repo / ".git", "HEAD"))


def test_selection_parsing():
    assert parse("peft:tests/test_custom_models.py -k 'MLP and LoRA'") == Target(
        "peft", "tests/test_custom_models.py", "MLP and LoRA")
    assert parse("trl:tests/test_model_utils.py").label == "tests/test_model_utils.py"
    with pytest.raises(ValueError, match="LIBRARY:PATH"):
        parse("tests/test_model_utils.py")


def test_cli_refuses_unknown_snapshot_library(tmp_path):
    with pytest.raises(SystemExit, match="LIBRARY one of"):
        cli.main(["--snapshot", f"nolib={tmp_path}", "--work-dir", str(tmp_path / "w")])
