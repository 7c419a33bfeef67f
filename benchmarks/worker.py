"""One backend, one workload, one fresh process: ``python -m benchmarks.worker``.

A fresh process per measurement means kernel signatures and peak RSS start
from zero, and so do compile caches in a cold process, whose "first step" really
includes compilation (a warm one gets the caches its backend's cold process
filled: ``runner``). The result (or the reason there is none) is written as
JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback


def run(backend: str, workload: str, size_name: str) -> dict:
    from .adapters import Unavailable, make_adapter
    from .model import SIZES
    from .workloads import WORKLOADS

    result = {"backend": backend, "workload": workload, "size": size_name}
    try:
        adapter = make_adapter(backend)
    except Unavailable as exc:
        return {**result, "status": "unavailable", "reason": str(exc)}
    try:
        measured = WORKLOADS[workload](adapter, SIZES[size_name])
    except Exception as exc:  # reported per cell; the suite goes on
        traceback.print_exc()
        first_line = (str(exc).strip().splitlines() or [""])[0][:300]
        return {**result, "status": "error", "reason": f"{type(exc).__name__}: {first_line}"}
    return {**result, "status": "ok", **measured, "backend_info": adapter.info()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--size", default="full")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = run(args.backend, args.workload, args.size)
    with open(args.out, "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
