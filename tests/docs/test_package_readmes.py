"""Each package README.md is the map a newcomer reads first, so it must list exactly the
modules of its folder: none omitted, none that no longer exists.

"Names a module" means a backticked file name of the folder's own kind (`name.py` in a Python
package, `Name.cpp` / `Name.h` under csrc/) or a backticked folder `name/`, with no other path
part. Every other backticked file or folder name (a path with a folder part such as
`native/Kernels.cpp` or `docs/compile.md`, a `.py` named under csrc/) names a file elsewhere: it
must exist, relative to the README's folder, the package root `torch_neuronx/` or the repository
root."""
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "torch_neuronx"
READMES = sorted(PACKAGE.rglob("README.md"))

_SPAN = re.compile(r"`([^`\s]+)`")
_PY_FILE = re.compile(r"^[\w.-]+\.py$")
_C_FILE = re.compile(r"^[\w.-]+\.(cpp|h)$")
_FOLDER = re.compile(r"^\w+/$")
_PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*/?$")


def _is_csrc(folder: Path) -> bool:
    return (PACKAGE / "csrc") in (folder, *folder.parents)


def _modules(folder: Path) -> set[str]:
    """What the README must name: source files and source subfolders of its folder."""
    if _is_csrc(folder):
        files = {p.stem for p in folder.iterdir() if p.suffix in (".cpp", ".h")}
        folders = {p.name + "/" for p in folder.iterdir() if p.is_dir()}
    else:
        files = {p.name for p in folder.glob("*.py")}
        folders = {p.name + "/" for p in folder.iterdir()
                   if p.is_dir() and (p / "__init__.py").exists()}
    return files | folders


def _named(text: str, folder: Path) -> tuple[set[str], set[str]]:
    """(modules of this folder the text names, paths it names that resolve nowhere)."""
    named, missing = set(), set()
    csrc = _is_csrc(folder)
    own_file = _C_FILE if csrc else _PY_FILE
    for span in _SPAN.findall(text):
        if _FOLDER.match(span) or own_file.match(span):
            name = span
            if csrc and not span.endswith("/"):
                name = span.rsplit(".", 1)[0]
            named.add(name)
            if not (folder / span).exists():
                missing.add(span)
        elif _PATH.match(span) and ("/" in span or _PY_FILE.match(span) or _C_FILE.match(span)) \
                and (span.endswith("/") or "." in span.rsplit("/", 1)[-1]):
            if not any((root / span).exists() for root in (folder, PACKAGE, REPO)):
                missing.add(span)
    return named, missing


def test_every_package_folder_has_a_readme():
    folders = {p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts}
    folders |= {p for p in (PACKAGE / "csrc").rglob("*") if p.is_dir()} | {PACKAGE / "csrc"}
    folders.discard(PACKAGE)  # the root's map is ARCHITECTURE.md
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "README.md").exists()) == []


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.parent.relative_to(PACKAGE)))
def test_readme_names_exactly_the_modules_of_its_folder(readme):
    folder = readme.parent
    named, missing = _named(readme.read_text(encoding="utf-8"), folder)
    modules = _modules(folder)
    omitted = sorted(modules - named)
    assert not omitted, f"{readme.relative_to(REPO)} omits {omitted}"
    assert not missing, f"{readme.relative_to(REPO)} names what does not exist: {sorted(missing)}"
