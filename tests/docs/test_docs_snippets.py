"""The code blocks of README.md and docs/*.md run as written.

``doc_snippets.py`` finds them and says how a block is marked to be skipped (with the reason,
in the document), only parsed, or given a tiny checkpoint where it names a real one. The python
blocks of a document run in one fresh interpreter, all documents at once.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import children
import doc_snippets

SNIPPETS = doc_snippets.all_snippets()
SESSION_DOCS = sorted({s.doc for s in SNIPPETS if s.language == "python" and not s.skipped})
BIN = str(Path(sys.executable).parent)


def _environment() -> dict[str, str]:
    return {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}


def _make_tiny_checkpoints(snippets: list[doc_snippets.Snippet], where: Path) -> None:
    from torch_neuronx.testing.tiny_models import TinySize, byte_tokenizer, tiny_causal_lm

    for snippet in snippets:
        path = snippet.markers.get("tiny")
        if path and not (where / path).exists():
            tiny_causal_lm("llama", TinySize(hidden=32, intermediate=64, vocab=320)).save_pretrained(where / path)
            byte_tokenizer(320).save_pretrained(where / path)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    """Each document's python blocks in one fresh interpreter, in a scratch directory of its own."""
    started = {}
    try:
        for doc in SESSION_DOCS:
            blocks = [s for s in SNIPPETS if s.doc == doc and s.language == "python" and not s.skipped]
            work = tmp_path_factory.mktemp(f"snippets-{doc.stem}")
            _make_tiny_checkpoints(blocks, work)
            (work / "session.py").write_text(doc_snippets.python_session(blocks))
            started[doc] = children.start([str(work / "session.py")], env=_environment(), cwd=work)
        yield {doc: children.finished(proc, timeout=600) for doc, proc in started.items()}
    finally:
        children.stop(started.values())


def _parse(command: str) -> None:
    """``torchneuron ...`` through the CLI's own parser: its flags, their values, its positionals."""
    import shlex

    from torch_neuronx.cli.main import build_parser, parse

    words = shlex.split(command)
    assert words[0] == "torchneuron", f"only torchneuron commands can be parsed, not {command!r}"
    parse(build_parser(), words[1:])


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.name)
def test_snippet_runs_as_written(snippet, sessions, tmp_path):
    if snippet.skipped:
        pytest.skip(snippet.skipped)
    if snippet.language == "python":
        result = sessions[snippet.doc]
        assert doc_snippets.ran(result.stdout, snippet), (result.stdout[-3000:], result.stderr[-2000:])
        return
    for command in snippet.commands():
        if snippet.parse_only:
            _parse(command)
            continue
        _make_tiny_checkpoints([snippet], tmp_path)
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_environment(), capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])


def test_every_marker_is_understood_and_says_why():
    """A misspelt marker would silently run (or not skip) its block; a skipped block says why."""
    for doc in doc_snippets.documents():
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if "<!-- snippet:" in line:
                assert doc_snippets._MARKER.match(line), f"{doc.name}:{number}: unknown marker {line.strip()}"
    for snippet in SNIPPETS:
        for action in ("skip", "parse-only"):
            assert snippet.markers.get(action, "reason") != "", f"{snippet.name}: {action} without a reason"
