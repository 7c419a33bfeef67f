"""``python -m tools.upstream``: the HF libraries' own test files on cpu and on neuron, side by side.

  python -m tools.upstream --snapshot transformers=GIT_DIR --snapshot trl=GIT_DIR
  python -m tools.upstream --select "peft:tests/test_custom_models.py -k 'MLP and LoRA'"
  python -m tools.upstream --only transformers --docs docs/huggingface.md
  python -m tools.upstream --render A/report.json B/report.json --docs docs/huggingface.md

Writes WORK_DIR/report.json (every test's outcome per device) and report.md;
with --docs, replaces the block between the upstream-suites markers there.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import sys
from pathlib import Path

from . import selection, shims, sources, table
from .run import DEVICES, prepare_suite_dir, run_target

BEGIN, END = "<!-- upstream-suites:begin -->", "<!-- upstream-suites:end -->"


def _snapshots(values: list[str]) -> dict[str, tuple[Path, str]]:
    found = {}
    for value in values:
        name, sep, where = value.partition("=")
        if not sep or name not in sources.LIBRARIES:
            raise SystemExit(f"--snapshot {value!r}: expected LIBRARY=GIT_DIR[@REV], LIBRARY one of "
                             f"{', '.join(sources.LIBRARIES)}")
        git_dir, _, rev = where.partition("@")
        if not Path(git_dir).is_dir():
            raise SystemExit(f"--snapshot {value!r}: {git_dir} is not a directory")
        found[name] = (Path(git_dir), rev or "HEAD")
    return found


def _host() -> str:
    import torch

    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def replace_docs_block(docs: Path, markdown: str) -> None:
    text = docs.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"--docs {docs}: no {BEGIN} ... {END} block to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    docs.write_text(f"{head}{BEGIN}\n{markdown}{END}{tail}", encoding="utf-8")


def run(targets: list[selection.Target], snapshots: dict, work: Path, timeout: float, test_timeout: float,
        threads: int | None, resume: bool = False, evidence: bool = False) -> dict:
    """Obtain, shim and run every target on every device; returns the report."""
    report = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "host": _host(), "sources": {}, "shims": [], "tests": {}}
    sources.install_test_dependencies(work / "deps")
    runs = []
    by_library: dict[str, list[selection.Target]] = {}
    for target in targets:
        by_library.setdefault(target.library, []).append(target)
    for name, lib_targets in by_library.items():
        if name not in sources.LIBRARIES:
            raise SystemExit(f"unknown library {name!r}; expected one of {', '.join(sources.LIBRARIES)}")
        suite = work / "suites" / name
        shutil.rmtree(suite, ignore_errors=True)  # laid anew each time: the shims apply to fresh files
        suite.mkdir(parents=True)
        report["sources"][name] = sources.obtain(sources.LIBRARIES[name], sorted({t.path for t in lib_targets}),
                                                 suite, work / "sdists", snapshots.get(name))
        listed = shims.SHIMS + (shims.EVIDENCE if evidence else ())
        report["shims"] += [dataclasses.asdict(s) for s in shims.apply(name, suite, listed)]
        prepare_suite_dir(suite)
        for target in lib_targets:
            entry = {"library": name, "target": target.label, "devices": {}}
            for device in DEVICES:
                print(f"[upstream] {name} {target.label} on {device} ...", flush=True)
                done = run_target(target, device, suite, work / "runs", timeout, test_timeout,
                                  work / "deps", threads, resume)
                entry["devices"][device] = {"status": done.status, "seconds": done.seconds,
                                            "records": done.records}
                print(f"[upstream]   {done.status}, {len(table.final_outcomes(done.records))} tests, "
                      f"{done.seconds:.0f} s (host)", flush=True)
            runs.append(entry)
            outcomes = {d: table.final_outcomes(entry["devices"][d]["records"]) for d in DEVICES}
            report["tests"][f"{name}:{target.label}"] = {
                nodeid: {d: outcomes[d].get(nodeid, ("not run",))[0] for d in DEVICES}
                for nodeid in sorted(set().union(*outcomes.values()))}
    report.update(table.compare(runs))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.upstream", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--select", action="append", default=[], metavar="LIB:PATH[ -k EXPR]",
                        help="a test file to run (repeatable; default: the built-in selection)")
    parser.add_argument("--only", help="comma-separated libraries of the default selection")
    parser.add_argument("--snapshot", action="append", default=[], metavar="LIB=GIT_DIR[@REV]",
                        help="a bare git directory of the library's upstream repository (DEVELOPERS.md)")
    parser.add_argument("--work-dir", type=Path, default=Path("upstream-suites"))
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per file and device (default 1200)")
    parser.add_argument("--test-timeout", type=float, default=300, help="seconds per test (default 300)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of the children")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the finished runs of an earlier invocation in the same work directory")
    parser.add_argument("--evidence", action="store_true",
                        help="also apply the evidence shims (tools/upstream/shims.py: EVIDENCE)")
    parser.add_argument("--docs", type=Path, help="markdown file whose upstream-suites block is replaced")
    parser.add_argument("--render", type=Path, nargs="+", metavar="REPORT_JSON",
                        help="only render saved reports (several are merged in the order given)")
    args = parser.parse_args(argv)

    if args.render:
        report = table.merge([json.loads(p.read_text(encoding="utf-8")) for p in args.render])
    else:
        targets = [selection.parse(s) for s in args.select] or list(selection.DEFAULT)
        if args.only:
            wanted = {n.strip() for n in args.only.split(",")}
            targets = [t for t in targets if t.library in wanted]
        if not targets:
            raise SystemExit("nothing selected")
        args.work_dir = args.work_dir.resolve()  # the children run in the suite directories
        args.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            report = run(targets, _snapshots(args.snapshot), args.work_dir, args.timeout, args.test_timeout,
                         args.threads, args.resume, args.evidence)
        except (sources.SourceError, shims.ShimError) as exc:
            raise SystemExit(f"upstream suites: {exc}") from None
        (args.work_dir / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    markdown = table.to_markdown(report)
    if not args.render:
        (args.work_dir / "report.md").write_text(markdown, encoding="utf-8")
    if args.docs:
        replace_docs_block(args.docs, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
