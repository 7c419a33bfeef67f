"""Compile caches degrade, they never break a job.

Each run is a fresh interpreter (in-process caches must not hide the disk).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import children
from torch_neuronx.runtime import cache_dirs

pytestmark = pytest.mark.slow

_CHILD = textwrap.dedent(
    """
    import json, torch, torch_neuronx
    def f(x):
        return torch.relu(x @ x.T + 1.0).sum(dim=0) * 0.5
    x = torch.randn(8, 8)
    out = torch.compile(f, backend="neuron", fullgraph=True)(x.to("neuron"))
    out2 = torch.compile(lambda x: torch.sin(x) * 2, backend="neuron")(x.to("neuron"))
    m = torch_neuronx.get_dynamo_metrics()
    print(json.dumps({"err": (out.cpu() - f(x)).abs().max().item(),
                      "err2": (out2.cpu() - torch.sin(x) * 2).abs().max().item(),
                      "hits": m["cache_hits"], "misses": m["cache_misses"]}))
    """
)
# Before _CHILD: once the import has chosen where graphs compile (a directory made at import when
# the configured cache is unusable), that directory gets the compiler set-up of the compile
# directory argv[2] (children.seed_toolchain). It goes only where the library says it compiles:
# a library looking elsewhere builds the set-up again, one pointing at the unusable path still fails.
_SEEDED_AT_IMPORT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import torch_neuronx
    sys.path.insert(0, sys.argv[1])
    import children
    children.seed_toolchain(Path(sys.argv[2]), Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    """
)
_UNUSABLE = "compiled graphs are not kept between runs"
REPO = Path(__file__).resolve().parents[2]


def _run(neff_cache_dir: Path, environ: dict[str, str], toolchain: Path | None = None) -> tuple[dict, str]:
    """_CHILD in a fresh interpreter; with ``toolchain``, the compile directory it picks at import
    seeded from that compile directory."""
    env = {k: v for k, v in environ.items() if not k.startswith("TORCHINDUCTOR_")}
    env.pop("TORCHNEURON_CHOSEN_INDUCTOR_CACHE_DIR", None)
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(neff_cache_dir)
    code = [_CHILD] if toolchain is None else [_SEEDED_AT_IMPORT + _CHILD, str(Path(children.__file__).parent), str(toolchain)]
    proc = subprocess.run([sys.executable, "-c", *code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["err"] < 1e-4 and result["err2"] < 1e-5, result
    return result, proc.stderr


def _truncated_library_runs(cache: Path, environ: dict[str, str]) -> dict:
    """Every compiled library cut short, as by a process killed while the compiler wrote them;
    then a run, and another."""
    # Every library, including Inductor's vector-ISA probe: a truncated probe used to make the
    # process believe the CPU had no AVX and build vectorised kernels without the ISA flags.
    compiled = cache_dirs.compile_dir(cache)
    libraries = [p for p in compiled.rglob("*.so") if "precompiled_headers" not in p.parts]
    for lib in libraries:
        lib.write_bytes(lib.read_bytes()[:64])
    first, first_stderr = _run(cache, environ)
    after_first = {"quarantined": list((compiled / "quarantine").iterdir()),
                   "sizes": [lib.stat().st_size for lib in libraries]}
    _, second_stderr = _run(cache, environ)
    return {"libraries": libraries, "first": first, "first_stderr": first_stderr, **after_first,
            "second_stderr": second_stderr}


def _corrupt_entry_runs(cache: Path, environ: dict[str, str]) -> dict:
    """Every FX graph cache entry overwritten with garbage; then a run, and another."""
    entries = [p for p in (cache_dirs.compile_dir(cache) / "fxgraph").rglob("*")
               if p.is_file() and not p.name.startswith(".")]
    for entry in entries:
        entry.write_bytes(b"not a pickle")
    _, first_stderr = _run(cache, environ)
    left = [entry for entry in entries if entry.exists()]
    second, second_stderr = _run(cache, environ)
    return {"entries": entries, "first_stderr": first_stderr, "left": left, "second": second,
            "second_stderr": second_stderr}


def _on_a_copy(filled: Future, warmed: Path, copy: Path, scenario, environ: dict[str, str]) -> dict:
    filled.result()  # the damaged caches are copies of a full one
    return scenario(Path(shutil.copytree(warmed, copy)), environ)


def _scenarios(base: Path, environ: dict[str, str]) -> dict:
    """Every scenario's fresh interpreters, two at a time (each is seconds of imports and C++
    builds on one core): the unusable cache beside the first run that fills a cache, then the
    damaged copies of that cache side by side. Each scenario's outcome is a finished future, so
    a failing run fails the tests that read it, no other."""
    a_file = base / "not-a-dir"
    a_file.write_text("the user's file")
    warmed = base / "warmed" / "cache"
    # Cold for graphs; the compiler set-up the session already built is not what this checks.
    session = cache_dirs.compile_dir(environ["TORCH_NEURONX_NEFF_CACHE_DIR"])
    children.seed_toolchain(session, cache_dirs.compile_dir(warmed))
    with ThreadPoolExecutor(max_workers=2) as pool:
        filled = pool.submit(_run, warmed, environ)
        outcomes = {"unusable": pool.submit(_run, a_file, environ, session), "filled": filled,
                    **{name: pool.submit(_on_a_copy, filled, warmed, base / name, scenario, environ)
                       for name, scenario in (("truncated", _truncated_library_runs),
                                              ("corrupt", _corrupt_entry_runs))}}
    return {"base": base, "a_file": a_file, "warmed": warmed, **outcomes}


# The scenarios need nothing from the tests before them.
runs = children.lane_fixture("runs", _scenarios, folder_prefix="torchneuron-robust-")


def test_first_run_compiles_both_graphs_into_the_cache(runs):
    """The cache the damaged copies are made of (its compiler set-up seeded, not its graphs)."""
    result, _ = runs["filled"].result()
    assert result["hits"] == 0 and result["misses"] == 2
    assert any((cache_dirs.compile_dir(runs["warmed"]) / "fxgraph").rglob("*"))


def test_cache_dir_that_is_a_file_warns_once_and_compiles(runs):
    result, stderr = runs["unusable"].result()
    assert result["hits"] == 0  # nothing persists: the FX graph cache is off, as with the NEFF cache disabled
    assert stderr.count(_UNUSABLE) == 1, stderr[-3000:]
    assert runs["a_file"].read_text() == "the user's file"


def test_truncated_library_is_quarantined_and_rebuilt(runs):
    run = runs["truncated"].result()
    assert run["libraries"], "no compiled library under TORCH_NEURONX_NEFF_CACHE_DIR/compile"
    assert run["first"]["hits"] == 2, run["first"]  # the graphs came from the FX cache, their libraries were rebuilt
    assert run["first_stderr"].count("could not be loaded") == 1, run["first_stderr"][-3000:]
    assert len(run["quarantined"]) >= 1
    assert all(size > 64 for size in run["sizes"])
    assert "could not be loaded" not in run["second_stderr"]  # repaired for good


def test_corrupt_fx_graph_entry_is_removed_after_its_warning(runs):
    run = runs["corrupt"].result()
    assert run["entries"]
    assert "unable to load compiled graph" in run["first_stderr"]
    assert not run["left"], "corrupt entries left in the cache"
    assert "unable to load compiled graph" not in run["second_stderr"]
    assert run["second"]["hits"] == 2


def test_precompiled_headers_stay_under_the_configured_cache():
    """This session's cache (tests/conftest.py): the scenarios' caches are seeded from it."""
    x = torch.randn(8, 8)
    out = torch.compile(lambda x: torch.relu(x @ x.T) * 0.5, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), torch.relu(x @ x.T) * 0.5)
    compile_dir = cache_dirs.compile_dir()
    assert any((compile_dir / "precompiled_headers").rglob("*.gch")), list(compile_dir.iterdir())


def test_library_builds_are_atomic(tmp_path):
    """A build interrupted half-way leaves no library behind (not a truncated one)."""
    from torch._inductor.cpp_builder import CppBuilder, CppOptions

    from torch_neuronx.compile import artifacts

    source = tmp_path / "lib.cpp"
    source.write_text('extern "C" int answer() { return 42; }\n')

    class Interrupted(CppBuilder):
        def build(self):
            Path(self._target_file).write_bytes(b"\\x7fELF half")  # the compiler was writing...
            raise KeyboardInterrupt  # ...when the process was killed

    builder = Interrupted(name="lib", sources=str(source), BuildOption=CppOptions(), output_dir=str(tmp_path))
    target = Path(builder.get_target_file_path())
    with pytest.raises(KeyboardInterrupt):
        artifacts.build_atomically(str(tmp_path / "lib.lock"), [builder])
    assert not target.exists() and not list(tmp_path.glob(".tmp-*"))
    good = CppBuilder(name="lib", sources=str(source), BuildOption=CppOptions(), output_dir=str(tmp_path))
    artifacts.build_atomically(str(tmp_path / "lib.lock"), [good])
    import ctypes

    assert ctypes.CDLL(str(target)).answer() == 42
