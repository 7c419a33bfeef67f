"""The suite's own machinery (children.py, conftest.py): a ``child_process`` module's tests run
as written in one child pytest, and each test of the parent session reports what the child found."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import children

TESTS = Path(__file__).resolve().parent

CHILD_MODULE = '''
import pytest

pytestmark = pytest.mark.child_process


def test_passes():
    assert sum([1, 2]) == 3


def test_fails():
    assert [1, 2] == [1, 3], "the child's own message"


def test_skips():
    pytest.skip("skipped in the child")


@pytest.mark.xfail(reason="known in the child")
def test_xfails():
    assert False
'''

PLAIN_MODULE = '''
def test_plain():
    assert "plain".upper() == "PLAIN"
'''

LANE_MODULE = '''
import children


runs = []


def _answer(environ):
    runs.append(environ)
    return 6 * 7


answer = children.lane_fixture("answer", _answer)


def test_takes_a_lane_outcome(answer):
    assert answer == 42


def test_a_second_test_shares_the_one_run(answer):
    assert answer == 42 and len(runs) == 1
'''

# Its one lane-fixture test deselected (``-m "not later"``), the module runs with the plain ones.
DESELECTED_LANE_MODULE = '''
import pytest

import children

unused = children.lane_fixture("unused", lambda environ: 0)


@pytest.mark.later
def test_deselected(unused):
    assert unused == 0


def test_selected():
    assert "selected".startswith("sel")
'''

# The suite's hooks, loaded under another name (this folder's conftest is itself "conftest").
PROBE_CONFTEST = f'''
import importlib.util

_spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_collection_modifyitems = _suite.pytest_collection_modifyitems
pytest_collection_finish = _suite.pytest_collection_finish
pytest_pyfunc_call = _suite.pytest_pyfunc_call
pytest_sessionfinish = _suite.pytest_sessionfinish


def pytest_configure(config):
    config.addinivalue_line("markers", "child_process: run in one child pytest")
    config.addinivalue_line("markers", "later: deselected in the probe")
'''


def _probe_session(folder: Path, environ: dict[str, str]) -> subprocess.CompletedProcess:
    """``pytest -v`` of a folder holding a ``child_process`` module, one using a lane fixture,
    a plain one and one whose lane-fixture test is deselected (named so that file order is not
    the order they must run in)."""
    (folder / "conftest.py").write_text(PROBE_CONFTEST)
    (folder / "test_a_child.py").write_text(CHILD_MODULE)
    (folder / "test_a_deselected_lane.py").write_text(DESELECTED_LANE_MODULE)
    (folder / "test_a_lane.py").write_text(LANE_MODULE)
    (folder / "test_b_plain.py").write_text(PLAIN_MODULE)
    path = os.pathsep.join(p for p in (str(TESTS), environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-rsx", "-p", "no:cacheprovider", "-m", "not later",
                           str(folder)],
                          cwd=folder, env={**environ, "PYTHONPATH": path}, capture_output=True, text=True,
                          timeout=600)


# Two sessions, each importing torch: no test before this one is needed.
probe_session = children.lane_fixture("probe_session", _probe_session, folder_prefix="torchneuron-child-probe-")


def test_a_child_process_module_reports_what_its_child_found_and_runs_last(probe_session):
    out = probe_session.stdout
    assert probe_session.returncode == 1, out + probe_session.stderr
    assert "1 failed, 5 passed, 1 skipped, 1 deselected, 1 xfailed" in out, out
    # The failure shows the child's assertion and message; skip and xfail keep their reasons.
    assert "in a child pytest" in out and "the child's own message" in out and "assert [1, 2] == [1, 3]" in out
    assert "skipped in the child" in out and "known in the child" in out
    # The plain modules run first (one of them only because its lane-fixture test is deselected),
    # then the one taking a lane job's outcome (its two tests share the job's one run), the
    # child_process module last: the lane had the session to run beside them.
    order = [line.split("::")[0] for line in out.splitlines() if "::test_" in line and "PASSED" in line]
    assert order == ["test_a_deselected_lane.py", "test_b_plain.py", "test_a_lane.py", "test_a_lane.py",
                     "test_a_child.py"], out


def test_a_child_with_no_report_fails_each_test_with_its_output(tmp_path):
    outcomes = children.child_pytest(tmp_path, ["test_missing.py::test_nothing"], dict(os.environ))
    assert set(outcomes) == {None}
    outcome, text = outcomes[None]
    assert outcome == "failed" and "child pytest exit 4" in text and "test_missing.py" in text
