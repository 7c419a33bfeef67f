"""The code blocks of README.md and docs/*.md, found and run as a reader would run them.

Every fenced block tagged ``python`` or ``bash`` is a snippet. HTML comments on the lines
right before a block's fence say how it runs, with a reason a reader can see in the source:

    <!-- snippet: skip: REASON -->        not run (it builds the environment, runs for
                                           minutes, needs torchrun or another checkout, ...)
    <!-- snippet: parse-only: REASON -->  bash: each ``torchneuron`` command is parsed by the
                                           CLI's own parser (flags, values, positionals), not run
    <!-- snippet: tiny PATH -->           a tiny causal-LM checkpoint (with its tokenizer) is
                                           made at PATH first, for a block naming a real model

The python blocks of one document run in order in one fresh interpreter (a reader pasting
them into one session), in a scratch directory; a bash block's commands run one by one in a
shell there, the virtual environment's ``bin`` first on ``PATH``.
"""
from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "bash")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(skip|parse-only|tiny)\b:?\s*(.*?)\s*-->\s*$")


@dataclasses.dataclass
class Snippet:
    doc: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    markers: dict[str, str]  # action -> reason or argument

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    @property
    def skipped(self) -> str | None:
        return self.markers.get("skip")

    @property
    def parse_only(self) -> bool:
        return "parse-only" in self.markers

    def commands(self) -> list[str]:
        """A bash block's commands: continuation lines joined, comments and blank lines dropped."""
        joined = re.sub(r"\\\n\s*", " ", self.code)
        commands = []
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
        return commands


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _markers(lines: list[str], fence: int) -> dict[str, str]:
    """The snippet markers on the lines right before line index ``fence``."""
    found, i = {}, fence - 1
    while i >= 0 and (match := _MARKER.match(lines[i])):
        found[match.group(1)] = match.group(2)
        i -= 1
    return found


def snippets(doc: Path) -> list[Snippet]:
    """Every python and bash block of ``doc``, in order."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        indent = len(opening.group(1))
        if opening.group(2) in LANGUAGES:
            code = "\n".join(line[indent:] for line in lines[i + 1:end])
            found.append(Snippet(doc, i + 1, opening.group(2), code, _markers(lines, i)))
        i = end + 1
    return found


def all_snippets() -> list[Snippet]:
    return [s for doc in documents() for s in snippets(doc)]


_SESSION = '''
import sys, traceback
namespace = {"__name__": "__main__"}
for name, source in BLOCKS:
    try:
        exec(compile(source, name, "exec"), namespace)
    except BaseException:
        print("SNIPPET-FAILED", name, flush=True)
        traceback.print_exc(file=sys.stdout)
        sys.exit(1)
    print("SNIPPET-RAN", name, flush=True)
'''


def python_session(blocks: list[Snippet]) -> str:
    """A script running ``blocks`` in order in one namespace; it prints ``SNIPPET-RAN name`` after
    each, or ``SNIPPET-FAILED name`` and the traceback, and stops."""
    return f"BLOCKS = {[(b.name, b.code) for b in blocks]!r}\n{_SESSION}"


def ran(output: str, snippet: Snippet) -> bool:
    return f"SNIPPET-RAN {snippet.name}" in output.splitlines()
