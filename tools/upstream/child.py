"""One pytest run in this process, for one device, recording every test's outcome as it happens.

``python -m tools.upstream.child DEVICE OUTCOMES.jsonl -- PYTEST ARGS``.
On ``cpu`` the interpreter is stock PyTorch: ``torch_neuronx`` is made
unimportable, because Accelerate, PEFT and Transformers pick ``neuron``
whenever ``importlib.util.find_spec("torch_neuronx")`` finds the package. The
outcome file is written line by line and flushed, so a run killed by its
timeout still reports the tests it finished.
"""
from __future__ import annotations

import json
import sys

BLOCKED = "torch_neuronx"


def _message(report) -> str:
    """The first line of what a test reported: the exception line, or the skip reason."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        text = str(longrepr[2])
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(longrepr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):  # "BackendCompilerFailed: backend='inductor' raised:"
        return f"{lines[0]} {lines[1]}"
    return lines[0] if lines else ""


class OutcomeRecorder:
    """A pytest plugin writing one JSON line per test phase that is not a plain setup/teardown pass."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")
        self._passed: set[str] = set()  # a test with subtests reports one passed call per subtest

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def pytest_runtest_logreport(self, report) -> None:
        if report.outcome == "passed" and (report.when != "call" or report.nodeid in self._passed):
            return
        if report.outcome == "passed":
            self._passed.add(report.nodeid)
        self._write({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                     "xfail": hasattr(report, "wasxfail"), "message": _message(report),
                     "seconds": round(report.duration, 2)})

    def pytest_collectreport(self, report) -> None:
        if report.outcome == "failed":
            self._write({"nodeid": report.nodeid, "when": "collect", "outcome": "failed",
                         "xfail": False, "message": _message(report)})

    def pytest_unconfigure(self, config) -> None:
        self._file.close()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] != "--":
        raise SystemExit("usage: python -m tools.upstream.child DEVICE OUTCOMES.jsonl -- PYTEST ARGS")
    device, outcomes, pytest_args = argv[0], argv[1], argv[3:]
    if device == "cpu":
        sys.modules[BLOCKED] = None  # find_spec() returns None and `import torch_neuronx` fails
    import pytest

    return int(pytest.main(pytest_args, plugins=[OutcomeRecorder(outcomes)]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
