"""Where each library's upstream test files come from, and fetching them into a suite directory.

Tests are taken from the library's sdist at the installed version when the
sdist ships them (``pip download --no-binary :all: --no-deps``); otherwise,
or for the files the sdist lacks, from a snapshot of the upstream repository
(a bare git directory, read with ``git archive``; DEVELOPERS.md says how to
get one). The snapshot is laid down first and the sdist over it, so the
installed version wins wherever it ships a file.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath


# Modules the upstream test files import that the libraries themselves do not install
# (module → PyPI name); also the `upstream` extra in pyproject.toml.
TEST_DEPENDENCIES = {"parameterized": "parameterized"}


class SourceError(RuntimeError):
    """The test files of a library could not be obtained; the message says what to supply."""


@dataclasses.dataclass(frozen=True)
class Library:
    name: str
    sdist_has_tests: bool
    snapshot_base: tuple[str, ...] = ()  # paths every run needs from a snapshot ("dir/*.py": its top-level files)
    snapshot_version: tuple[str, str] = ("", "")  # (file in the snapshot, regex whose group 1 is the version)
    upstream: str = ""  # the public repository a snapshot is taken from

    @property
    def installed_version(self) -> str:
        return importlib.metadata.version(self.name)


LIBRARIES = {lib.name: lib for lib in (
    # The 5.24 sdist ships only the common mixins (tests/*.py); the model tests, the causal-LM
    # tester and the generation tests come from a snapshot.
    Library("transformers", True,
            ("tests/*.py", "tests/generation", "tests/exporters", "tests/models/__init__.py",
             "tests/utils/test_configuration_utils.py", "tests/utils/tiny_model_summary.json",
             "src/transformers/testing_utils.py"),
            ("src/transformers/__init__.py", r'__version__ = "([^"]+)"'), "huggingface/transformers"),
    Library("accelerate", True),
    Library("peft", True),
    # The TRL sdist ships no tests.
    Library("trl", False,
            ("tests/__init__.py", "tests/conftest.py", "tests/testing_utils.py", "tests/testing_constants.py",
             "tests/data"),
            ("VERSION", r"(\S+)"), "huggingface/trl"),
)}


def _needs_snapshot(lib: Library, targets: list[str]) -> list[str]:
    """Snapshot paths for ``targets``: the library's base paths, then the targets the sdist lacks
    (with the sdist's tests, the folder of each target: the model's test package)."""
    if not lib.sdist_has_tests:
        return [*lib.snapshot_base, *targets]
    if not lib.snapshot_base:
        return []
    return [*lib.snapshot_base, *sorted({str(PurePosixPath(t).parent) for t in targets})]


def _git(git_dir: Path, *args: str) -> bytes:
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)
    if done.returncode != 0:
        raise SourceError(f"git {' '.join(args[:2])} in {git_dir} failed: {done.stderr.decode().strip()}")
    return done.stdout


def _expand(git_dir: Path, rev: str, paths: list[str]) -> list[str]:
    """``dir/*.py`` becomes the top-level ``.py`` files of ``dir`` at ``rev``."""
    expanded = []
    for path in paths:
        if path.endswith("/*.py"):
            folder = path[: -len("/*.py")]
            listing = _git(git_dir, "ls-tree", "--name-only", rev, folder + "/").decode().split()
            expanded += [name for name in listing if name.endswith(".py")]
        else:
            expanded.append(path)
    return expanded


def _extract_snapshot(lib: Library, git_dir: Path, rev: str, paths: list[str], dest: Path) -> dict:
    commit = _git(git_dir, "rev-parse", rev).decode().strip()
    archive = _git(git_dir, "archive", "--format=tar", commit, "--", *_expand(git_dir, commit, paths))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    version_file, pattern = lib.snapshot_version
    text = _git(git_dir, "show", f"{commit}:{version_file}").decode() if version_file else ""
    match = re.search(pattern, text) if pattern else None
    date = _git(git_dir, "show", "-s", "--format=%cs", commit).decode().strip()
    return {"kind": "snapshot", "repository": lib.upstream, "commit": commit, "date": date,
            "version": match.group(1) if match else "unknown", "paths": paths}


def _download_sdist(lib: Library, cache: Path) -> Path:
    version = lib.installed_version
    cache.mkdir(parents=True, exist_ok=True)
    wanted = [p for p in cache.glob("*.tar.gz") if p.name.lower().replace("_", "-") == f"{lib.name}-{version}.tar.gz"]
    if not wanted:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                   "--dest", str(cache), f"{lib.name}=={version}"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wanted = [p for p in cache.glob("*.tar.gz")
                  if p.name.lower().replace("_", "-") == f"{lib.name}-{version}.tar.gz"]
        if done.returncode != 0 or not wanted:
            raise SourceError(f"pip download of the {lib.name} {version} sdist failed: "
                              f"{(done.stderr.strip().splitlines() or ['no sdist'])[-1]}")
    return wanted[0]


def _extract_sdist_tests(sdist: Path, dest: Path) -> list[str]:
    """Extract ``<name>-<version>/tests/**`` to ``dest/tests``; returns the files taken."""
    taken = []
    with tarfile.open(sdist) as tar:
        members = []
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) > 2 and parts[1] == "tests" and member.isfile():
                member.name = str(PurePosixPath(*parts[1:]))
                members.append(member)
                taken.append(member.name)
        tar.extractall(dest, members=members, filter="data")
    return taken


def obtain(lib: Library, targets: list[str], dest: Path, cache: Path,
           snapshot: tuple[Path, str] | None) -> dict:
    """Lay ``lib``'s test files for ``targets`` under ``dest``; returns where each part came from."""
    provenance: dict = {"installed": lib.installed_version}
    paths = _needs_snapshot(lib, targets)
    if paths:
        if snapshot is None:
            raise SourceError(f"{lib.name}: its test files {', '.join(paths)} are not in its sdist; "
                              f"give a snapshot of {lib.upstream} with --snapshot {lib.name}=GIT_DIR[@REV]")
        provenance["snapshot"] = _extract_snapshot(lib, snapshot[0], snapshot[1], paths, dest)
    if lib.sdist_has_tests:
        sdist = _download_sdist(lib, cache)
        taken = _extract_sdist_tests(sdist, dest)
        provenance["sdist"] = {"kind": "sdist", "file": sdist.name, "version": lib.installed_version,
                               "files": len(taken)}
    missing = [t for t in targets if not (dest / t).is_file()]
    if missing:
        raise SourceError(f"{lib.name}: no test file {', '.join(missing)} in what was obtained")
    return provenance


def install_test_dependencies(target: Path) -> list[str]:
    """``pip install --target`` the missing test dependencies (the environment is left as it is);
    returns the packages installed. The children put ``target`` on their path."""
    missing = [pip_name for module, pip_name in TEST_DEPENDENCIES.items()
               if importlib.util.find_spec(module) is None and not (target / module).exists()]
    if missing:
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), *missing]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SourceError(f"pip install {' '.join(missing)} failed: "
                              f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return missing
