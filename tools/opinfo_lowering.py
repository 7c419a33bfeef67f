"""Which OpInfo ops would have Neuron kernels: each op's ATen kernels lowered to StableHLO.

  python -m tools.opinfo_lowering                 # whole op_db, summary + JSON
  python -m tools.opinfo_lowering --ops add,erfinv
  python -m tools.opinfo_lowering --write-docs    # refresh the list in docs/compile.md

For every op of PyTorch's ``op_db`` (each variant) that supports float32 on CPU,
the first float32 sample is run on CPU under a dispatch mode that records every
ATen kernel it calls; each distinct kernel signature is lowered with
:func:`torch_neuronx.compile.kernel_lowering.lower_kernel` (make_fx on ``meta``
inputs → torch-mlir → StableHLO), as the real product does for each eager op.
An op *lowers* when all its kernels do; otherwise it would fall back to CPU on
Trainium. View kernels are not lowered: the real product runs them without a
kernel ("View ops are whitelisted", TR ``csrc/core/NeuronBindings.cpp:170-229``).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from torch_neuronx.compile.kernel_lowering import LoweringResult, as_meta, lower_kernel

DOCS = Path(__file__).resolve().parent.parent / "docs" / "compile.md"
BEGIN, END = "<!-- opinfo-lowering:begin -->", "<!-- opinfo-lowering:end -->"


class _RecordKernels(TorchDispatchMode):
    """Records each ATen kernel call (with ``meta`` copies of its arguments) and runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch._ops.OpOverload, tuple, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not func.is_view and func.namespace == "aten":
            self.calls.append((func, as_meta(args), as_meta(kwargs)))
        return func(*args, **kwargs)


def _signature(func, args, kwargs) -> str:
    def describe(v: Any) -> str:
        return f"T{tuple(v.shape)}{v.dtype}{v.stride()}" if isinstance(v, torch.Tensor) else repr(v)

    return f"{func}|{pytree.tree_map(describe, (args, kwargs))}"


def sweep(names: set[str] | None = None, verbose: bool = False) -> dict:
    """Lower the kernels of one float32 sample per op; returns per-op results."""
    from torch.testing._internal.common_methods_invocations import op_db

    cache: dict[str, LoweringResult] = {}
    ops: dict[str, dict] = {}
    for info in op_db:
        full = f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name
        if names is not None and info.name not in names and full not in names:
            continue
        if torch.float32 not in info.supported_dtypes("cpu"):
            continue
        if verbose:
            print(full, file=sys.stderr, flush=True)
        try:
            sample = next(iter(info.sample_inputs("cpu", torch.float32, requires_grad=False)))
            with _RecordKernels() as recorder:
                info(sample.input, *sample.args, **sample.kwargs)
        except Exception as exc:  # the sample itself does not run on CPU: not counted
            ops[full] = {"status": "no sample", "reason": f"{type(exc).__name__}: {str(exc)[:120]}"}
            continue
        failing: dict[str, str] = {}
        unchecked: dict[str, str] = {}
        for func, args, kwargs in recorder.calls:
            key = _signature(func, args, kwargs)
            if key not in cache:
                cache[key] = lower_kernel(func.name(), args, kwargs)
            result = cache[key]
            if result.lowered is None and result.stage is None:
                raise SystemExit(result.reason)  # torch-mlir is not installed
            if result.lowered is None:
                unchecked.setdefault(func.name(), result.reason)
            elif not result.lowered:
                failing.setdefault(func.name(), f"{result.stage}: {result.reason}")
        status = "does not lower" if failing else "not checked" if unchecked else "lowers"
        ops[full] = {
            "status": status,
            "unchecked_kernels": unchecked,
            "kernels": sorted({f.name() for f, _, _ in recorder.calls}),
            "failing_kernels": failing,
        }
    return _summarise(ops, cache)


def _summarise(ops: dict[str, dict], cache: dict) -> dict:
    checked = [o for o in ops.values() if o["status"] in ("lowers", "does not lower")]
    lowering = [o for o in checked if o["status"] == "lowers"]
    return {
        "torch": torch.__version__,
        "torch_mlir": _torch_mlir_version(),
        "ops_checked": len(checked),
        "ops_lowering": len(lowering),
        "ops_not_checked": sum(1 for o in ops.values() if o["status"] == "not checked"),
        "fraction_lowering": len(lowering) / len(checked) if checked else 0.0,
        "kernel_signatures_lowered": len(cache),
        "ops": ops,
    }


def sweep_isolated(names: list[str], chunk: int = 40) -> dict:
    """:func:`sweep` in child processes, ``chunk`` ops each: torch-mlir can crash the process on
    some kernels (a segmentation fault on ``logsumexp``'s), and such an op is recorded as not
    lowering instead of ending the sweep."""
    import subprocess
    import tempfile

    merged: dict = {}
    pending = [names[i:i + chunk] for i in range(0, len(names), chunk)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "part.json"
        while pending:
            part = pending.pop(0)
            command = [sys.executable, "-m", "tools.opinfo_lowering", "--ops", ",".join(part), "--json", str(out)]
            try:
                returncode = subprocess.run(command, capture_output=True, text=True, timeout=900).returncode
            except subprocess.TimeoutExpired:  # torch-mlir can also loop: counted like a crash
                returncode = "timeout"
            if returncode == 0:
                merged.update(json.loads(out.read_text())["ops"])
            elif len(part) > 1:
                pending[:0] = [[name] for name in part]
            else:
                merged[part[0]] = {"status": "does not lower", "kernels": [], "unchecked_kernels": {},
                                   "failing_kernels": {"?": f"crash: torch-mlir ended the process ({returncode})"}}
    return _summarise(merged, {})


def all_op_names() -> list[str]:
    from torch.testing._internal.common_methods_invocations import op_db

    return [f"{i.name}.{i.variant_test_name}" if i.variant_test_name else i.name for i in op_db]


def _torch_mlir_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("torch-mlir")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _short(reason: str) -> str:
    match = re.search(r"no lowering for (\S+)", reason)
    if match:
        return f"no lowering for `{match.group(1)}`"
    return reason.split(":", 1)[0] + ": " + reason.split(":", 2)[-1].strip()[:80]


def markdown(result: dict) -> str:
    """The docs section: the figure and the ops that do not lower, with the first failing kernel."""
    lines = [
        BEGIN,
        f"Generated by `python -m tools.opinfo_lowering --write-docs` (torch {result['torch']}, "
        f"torch-mlir {result['torch_mlir']}; one float32 sample per `op_db` entry; an emulator "
        "check, not a Trainium measurement).",
        "",
        f"**{result['ops_lowering']} of {result['ops_checked']} ops lower "
        f"({100 * result['fraction_lowering']:.1f}%)**; the other "
        f"{result['ops_checked'] - result['ops_lowering']} would fall back to CPU on Trainium:",
        "",
        "| op | first kernel that does not lower | why |",
        "|---|---|---|",
    ]
    for name, op in sorted(result["ops"].items()):
        if op["status"] == "does not lower":
            kernel, reason = next(iter(op["failing_kernels"].items()))
            lines.append(f"| `{name}` | `{kernel}` | {_short(reason).replace('|', '/')} |")
    lines.append(END)
    return "\n".join(lines)


def write_docs(result: dict, path: Path = DOCS) -> None:
    text = path.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} … {END} section to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + markdown(result) + tail, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated op names (default: all of op_db)")
    parser.add_argument("--json", type=Path, default=Path("opinfo-lowering.json"), help="where to write results")
    parser.add_argument("--write-docs", action="store_true", help="replace the list in docs/compile.md")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each op's name on stderr")
    args = parser.parse_args(argv)
    if args.ops:
        result = sweep({n.strip() for n in args.ops.split(",")}, args.verbose)
    else:
        result = sweep_isolated(all_op_names())
    args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"{result['ops_lowering']}/{result['ops_checked']} ops lower "
          f"({100 * result['fraction_lowering']:.1f}%), {result['ops_not_checked']} not checked; "
          f"details in {args.json}")
    if args.write_docs:
        write_docs(result)


if __name__ == "__main__":
    main(sys.argv[1:])
