"""The persistent compile cache across processes, and torch.compiler cache artifacts."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import children
from torch_neuronx.runtime.cache_dirs import compile_dir

pytestmark = pytest.mark.slow

# A fresh interpreter per run: in-process caches must not help.
_CHILD = textwrap.dedent(
    """
    import json, sys, torch, torch_neuronx
    from pathlib import Path
    mode, artifacts = sys.argv[1], Path(sys.argv[2])
    if mode == "load":
        torch.compiler.load_cache_artifacts(artifacts.read_bytes())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("neuron")
    x = torch.randn(4, 8, device="neuron")
    with torch.no_grad():
        out = torch.compile(model, backend="neuron", fullgraph=True)(x)
        ref = model.cpu()(x.cpu())
    if mode == "save":
        saved = torch.compiler.save_cache_artifacts()
        artifacts.write_bytes(saved[0])
    m = torch_neuronx.get_dynamo_metrics()
    print(json.dumps({"hits": m["cache_hits"], "misses": m["cache_misses"], "compile_s": m["compile_seconds"],
                      "graph_ids": [g["graph_id"] for g in m["compiled_graphs"]],
                      "neff_cache": [g["neff_cache"] for g in m["compiled_graphs"]],
                      "device": str(out.device), "max_err": (out.cpu() - ref).abs().max().item()}))
    """
)


def _run(cache_dir: Path, mode: str, artifacts: Path, environ: dict[str, str]) -> dict:
    env = {k: v for k, v in environ.items() if not k.startswith("TORCHINDUCTOR_")}
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(cache_dir)
    env.pop("TORCHNEURON_LOWER_GRAPHS", None)  # lowered (the default): its key must be stable across processes
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(artifacts)], env=env, capture_output=True, text=True, timeout=600,
        cwd=artifacts.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["device"] == "neuron:0" and result["max_err"] < 1e-5
    return result


def _round_trip(folder: Path, environ: dict[str, str]) -> dict:
    """A cold process saving cache artifacts, a warm one, and one loading the artifacts into an
    empty cache: three fresh interpreters, one after the other."""
    artifacts = folder / "artifacts.bin"
    # Cold for graphs; the compiler set-up the session already built is not what this checks.
    children.seed_toolchain(compile_dir(environ["TORCH_NEURONX_NEFF_CACHE_DIR"]), compile_dir(folder / "cache"))
    cold = _run(folder / "cache", "save", artifacts, environ)
    fx_graphs = any((compile_dir(folder / "cache") / "fxgraph").rglob("*"))
    warm = _run(folder / "cache", "plain", artifacts, environ)
    # A machine with an empty cache (its compiler set-up seeded), given the saved artifacts.
    children.seed_toolchain(compile_dir(folder / "cache"), compile_dir(folder / "other-cache"))
    loaded = _run(folder / "other-cache", "load", artifacts, environ)
    return {"folder": folder, "cold": cold, "fx_graphs": fx_graphs, "warm": warm, "artifacts": artifacts,
            "loaded": loaded}


# The three processes need nothing from the tests before them (the first starts with the
# compiler set-up).
round_trip = children.lane_fixture("round_trip", _round_trip, folder_prefix="torchneuron-compile-cache-")


def test_second_process_hits_the_cache_and_artifacts_round_trip(round_trip):
    cold, warm, loaded = round_trip["cold"], round_trip["warm"], round_trip["loaded"]
    assert cold["hits"] == 0 and cold["misses"] == 1
    assert round_trip["fx_graphs"], "cache not under TORCH_NEURONX_NEFF_CACHE_DIR/compile"
    assert warm["hits"] == 1 and warm["misses"] == 0
    # A machine with an empty cache, given the saved artifacts, compiles nothing either.
    assert round_trip["artifacts"].stat().st_size > 0
    assert loaded["hits"] == 1 and loaded["misses"] == 0
    # The graph key (sha256 of the StableHLO text + I/O + compiler suffix) is the same in every
    # process (TR neuron_dynamo_backend/utils/stablehlo_utils.py:14-56); the persistent NEFF
    # cache then knows the graph.
    assert len(cold["graph_ids"]) == 1 and cold["graph_ids"] == warm["graph_ids"] == loaded["graph_ids"]
    assert cold["neff_cache"] == ["compiled"] and warm["neff_cache"] == ["disk hit"]
    assert loaded["neff_cache"] == ["compiled"]  # another NEFF cache directory
