"""The benchmark suite runs end to end and writes well-formed results.

Timings are never asserted (they are measured by ``python -m benchmarks``);
these tests check the suite's plumbing: files, row fields, pooling of samples,
target ratios, and that missing backends, failures and timeouts become
reported cells instead of crashes. The PyTorch/XLA venv is never needed.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import children
from benchmarks import report, stats, worker
from benchmarks.__main__ import LIMIT_ROWS, main, parse_only
from benchmarks.backends import BY_NAME, EAGER_WORKLOADS, IN_PROCESS_WORKLOADS
from benchmarks.runner import Step, run_suite, run_worker
from benchmarks.workloads import WORKLOADS

REPO = Path(__file__).resolve().parents[2]


def _smoke_suite(folder: Path, environ: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m benchmarks --smoke`` (no PyTorch/XLA venv): the finished process and its folder."""
    env = dict(environ, TORCHNEURON_BENCH_XLA_VENV=str(folder / "no-xla-venv"))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--only", "cpu,neuron,xla,train,ops",
         "--out", str(folder / "results")], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    return done, folder


# A child process needing nothing from the tests before it (it asserts no timing).
smoke_suite = children.lane_fixture("smoke_suite", _smoke_suite, folder_prefix="torchneuron-bench-smoke-")


@pytest.mark.slow
def test_smoke_suite_writes_json_and_markdown_with_complete_rows(smoke_suite):
    done, tmp_path = smoke_suite
    out = tmp_path / "results"
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    page = (out / "results.md").read_text()

    rows = data["rows"]
    assert rows and all(set(row) == set(report.ROW_FIELDS) for row in rows)
    ok = {(r["backend"], r["workload"], r["metric"]): r for r in rows if r["status"] == "ok"}
    for backend in ("cpu", "neuron"):
        for metric in ("first_step_ms", "steady_step_ms", "peak_rss_mb"):
            assert (backend, "train", metric) in ok
        for metric in ("add_us", "mul_us", "fill_us", "mm64_us", "view_inplace_us", "atan2_us"):
            assert (backend, "ops", metric) in ok
    for row in ok.values():
        assert row["n"] >= 1 and row["unit"] is not None
        assert row["min"] <= row["median"] <= row["max"] and math.isfinite(row["median"])
    # Accounting on: the first neuron step compiles kernels; native CPU has no such count.
    assert ok[("neuron", "train", "compilations")]["median"] > 0
    assert ("cpu", "train", "compilations") not in ok
    # Only the neuron device has a device model: a projected step and the projection's own cost.
    assert ok[("neuron", "train", "projected_step_ms")]["median"] > 0
    assert ok[("neuron", "train", "projection_in_steady_steps_pct")]["unit"] == "%"
    assert ok[("neuron", "train", "projection_deferred_ms")]["median"] > 0
    assert ("cpu", "train", "projected_step_ms") not in ok

    xla = [r for r in rows if r["backend"] == "xla"]
    assert {r["workload"] for r in xla} == {"train", "ops"}
    assert all(r["status"] == "unavailable" and "xla_env" in r["reason"] for r in xla)

    # One pair (smoke): a ratio, but no interval, so no verdict either way.
    steady = next(t for t in data["targets"] if t["label"].startswith("training step, steady state: neuron eager /"))
    assert steady["ratio"] > 0 and steady["pairs"] == 1 and len(steady["pair_ratios"]) == 1
    assert steady["low"] is None and steady["verdict"] == "undecided"
    first_vs_xla = next(t for t in data["targets"] if t["label"].startswith("time to first step: neuron eager"))
    assert first_vs_xla["ratio"] is None and "xla/train" in first_vs_xla["missing"]

    assert "## Targets" in page and "## train" in page and "## ops" in page
    # Captured output is no terminal: one line per process, and no progress bar drawn into it.
    assert re.search(r"^\[1/1\] cpu +ops +cold ok", done.stdout, re.M) and "━" not in done.stdout
    assert "xla / train: unavailable" in page
    assert data["meta"]["size"] == "smoke" and "neuron: torch" in data["meta"]["versions"]

    # Runs made side by side combine into one report whose samples are pooled.
    assert main(["--combine", str(out), str(out), "--out", str(tmp_path / "both")]) == 0
    both = json.loads((tmp_path / "both" / "results.json").read_text())
    doubled = {(r["backend"], r["workload"], r["metric"]): r["n"] for r in both["rows"] if r["status"] == "ok"}
    assert doubled == {key: 2 * row["n"] for key, row in ok.items()}
    # Each run keeps its own rounds: two pairs, each within one run, with the same ratio.
    steady_both = next(t for t in both["targets"] if t["label"] == steady["label"])
    # (the one-pair ratio is a geometric mean, exp(log r): equal to r up to rounding)
    assert steady_both["pair_ratios"] == pytest.approx([steady["ratio"]] * 2, rel=1e-12)
    assert both["meta"]["pairs"] == "1 + 1"


def _warm_suite(folder: Path, environ: dict[str, str]) -> dict:
    """Two rounds of the compiled backend's smoke ``compiled_in_process`` cell, cold then warm, as
    the suite runs them. The cell compiles the training and decode graphs of CPU Inductor and neuron
    in one process, so the warm round checks both backends' graphs (the runner plans ``cpu_inductor``
    the same way: ``test_benchmark_stats``); its two cells are also the ones the
    ``compiled_in_process`` test checks, so the suite compiles those graphs once, not twice."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--only", "neuron_compiled,compiled_in_process",
         "--pairs", "2", "--compiled-pairs", "2", "--out", str(folder)], cwd=REPO, env=environ,
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((folder / "results.json").read_text())


# A child process needing nothing from the tests before it; two tests read its cells.
warm_suite = children.lane_fixture("warm_suite", _warm_suite, folder_prefix="torchneuron-bench-warm-")


@pytest.mark.slow
@pytest.mark.compiled_models
def test_warm_processes_compile_nothing_their_cold_process_compiled(warm_suite):
    """Round one compiles into its cache directories; round two, warm, finds every graph there
    (Inductor's own hit and miss counters, not the runner's label), and every NEFF."""
    results = warm_suite["raw"]
    assert [(r["status"], r["cache"]) for r in results] == [("ok", "cold"), ("ok", "warm")], \
        [r.get("reason") for r in results]
    cold, warm = (r["backend_info"] for r in results)
    assert cold["compile_caches"]["fx_graph"]["misses"] > 0 and cold["compile_caches"]["fx_graph"]["hits"] == 0
    assert warm["compile_caches"]["fx_graph"]["hits"] > 0 and warm["compile_caches"]["fx_graph"]["misses"] == 0
    assert cold["dynamo_metrics"]["cache_misses"] > 0 and warm["dynamo_metrics"]["cache_misses"] == 0


def test_every_declared_workload_is_implemented():
    assert set(EAGER_WORKLOADS) | set(IN_PROCESS_WORKLOADS) == set(WORKLOADS)
    for backend in BY_NAME.values():
        assert set(backend.workloads) <= set(WORKLOADS)


def test_static_cache_generate_row_times_each_token_and_decodes_like_cpu():
    from benchmarks.adapters import make_adapter
    from benchmarks.model import SMOKE

    rows = {backend: WORKLOADS["generate_static"](make_adapter(backend), SMOKE) for backend in ("cpu", "neuron")}
    for row in rows.values():
        metrics = row["metrics"]
        # Each measured request times its tokens after the first (that one is the TTFT).
        assert len(metrics["per_token_ms"]) == SMOKE.decode_requests * (SMOKE.new_tokens - 1)
        assert len(metrics["ttft_ms"]) == SMOKE.decode_requests
        assert all(t > 0 for t in metrics["ttft_ms"] + metrics["per_token_ms"])
        assert len(row["info"]["tokens"]) == SMOKE.new_tokens
    assert rows["neuron"]["info"]["tokens"] == rows["cpu"]["info"]["tokens"]


def test_eager_decode_in_one_process_pairs_each_request_with_cpu():
    """``python -m benchmarks.bench_compile eager-decode``: both devices' loop and ``generate()``
    decode the same tokens in one process, and each gives a paired ratio with its interval."""
    from benchmarks.bench_compile import decode
    from benchmarks.model import SMOKE

    result = decode(rounds=3, compiled=False, size=SMOKE)
    assert set(result) == {"loop", "generate"}
    for row in result.values():
        assert row["same_tokens"] is True
        assert row["per_token_ms"]["cpu"] > 0 and row["per_token_ms"]["neuron"] > 0
        mean, low, high = row["neuron_over_cpu"]
        assert 0 < low <= mean <= high


def test_decode_in_process_workload_reports_each_paths_ratio_and_both_devices_medians():
    """The suite's ``decode_in_process`` cell runs that in-process decode: per process, one ratio
    per decode path and the per-token medians of both devices, the ratio consistent with them."""
    from benchmarks.adapters import make_adapter
    from benchmarks.model import SMOKE

    row = WORKLOADS["decode_in_process"](make_adapter("neuron"), SMOKE)
    metrics = row["metrics"]
    for what in ("loop", "generate"):
        assert row["info"][what]["same_tokens"] is True
        low, high = row["info"][what]["ratio_interval"]
        assert 0 < low <= metrics[f"{what}_ratio"] <= high
        assert metrics[f"{what}_cpu_per_token_ms"] > 0 and metrics[f"{what}_neuron_per_token_ms"] > 0
    assert report.unit_of("loop_cpu_per_token_ms") == "ms" and report.unit_of("loop_ratio") == "×"
    # ``--limits`` runs it, on the neuron backend only (one process per round).
    assert "decode_in_process" in parse_only(LIMIT_ROWS)[1]
    assert [b.name for b in BY_NAME.values() if "decode_in_process" in b.workloads] == ["neuron"]


def test_one_process_rows_pool_each_processs_ratio_over_processes():
    """A target without a denominator takes each process's own ratio as one observation:
    geometric mean, t interval and verdict as ``stats.paired_ratio`` gives them for those ratios;
    processes of other cells do not enter, and without the cell the row names what is missing."""
    ratios = {"generate_ratio": [1.01, 1.03, 1.02, 1.00], "loop_ratio": [1.10, 1.12, 1.11, 1.09]}
    results = [{"backend": "neuron", "workload": "decode_in_process", "status": "ok", "repeat": repeat,
                "metrics": {name: values[repeat] for name, values in ratios.items()}} for repeat in range(4)]
    results.append({"backend": "neuron", "workload": "generate", "status": "ok", "repeat": 0,
                    "metrics": {"generate_ratio": 5.0}})
    targets = {t["label"]: t for t in report.ratios(report.summarize(results), results)}
    generate = targets["static-cache generate(), per token, both devices in one process: neuron / CPU"]
    loop = targets["per-token latency, manual decode loop, both devices in one process: neuron / CPU"]
    for target, name, verdict in ((generate, "generate_ratio", "met"), (loop, "loop_ratio", "not met")):
        expected = stats.paired_ratio(ratios[name])
        assert target["pair_ratios"] == ratios[name] and target["pairs"] == 4 and target["limit"] == 1.05
        assert (target["ratio"], target["low"], target["high"]) == pytest.approx(
            (expected.geometric_mean, expected.low, expected.high))
        assert target["verdict"] == verdict
    # Two processes on either side of the limit: undecided, with the processes that would decide it.
    close = [results[0], {**results[1], "metrics": {"generate_ratio": 1.07, "loop_ratio": 1.0}}]
    generate = next(t for t in report.ratios(report.summarize(close), close) if t["label"] == generate["label"])
    assert generate["verdict"] == "undecided" and generate["pairs_to_decide"] > 2
    unmeasured = next(t for t in report.ratios([], []) if t["label"] == generate["label"])
    assert unmeasured["ratio"] is None and unmeasured["missing"] == "neuron/decode_in_process"


@pytest.mark.slow
@pytest.mark.compiled_models
def test_compiled_in_process_workload_reports_the_training_step_and_decode_of_both_backends(warm_suite):
    """The suite's ``compiled_in_process`` cell, in a cold process and in a warm one (its graphs
    from the cache): CPU Inductor and neuron compiled in one process, the same losses and tokens on
    both sides, per process one ratio per path inside its interval and both sides' medians;
    ``--limits`` runs it, on ``neuron_compiled`` only."""
    assert [cell["cache"] for cell in warm_suite["raw"]] == ["cold", "warm"]
    for cell in warm_suite["raw"]:
        assert cell["status"] == "ok", (cell["cache"], cell.get("reason"))
        metrics, info = cell["metrics"], cell["info"]
        assert info["train"]["same_loss"] is True and info["loop"]["same_tokens"] is True, cell["cache"]
        for what, median in (("train", "step_ms"), ("loop", "per_token_ms")):
            low, high = info[what]["ratio_interval"]
            assert 0 < low <= metrics[f"{what}_ratio"] <= high
            assert metrics[f"{what}_inductor_{median}"] > 0 and metrics[f"{what}_neuron_{median}"] > 0
        # Both sides ran their compiled graphs: the generated code's host buffers, counted per request.
        calls = info["host_calls_per_request"]
        assert calls["neuron"]["empty_strided_cpu"] > 0 and calls["inductor"]["empty_strided_cpu"] > 0
    assert "compiled_in_process" in parse_only(LIMIT_ROWS)[1]
    assert [b.name for b in BY_NAME.values() if "compiled_in_process" in b.workloads] == ["neuron_compiled"]
    # Each of the two paths is one of the one-process rows, with the compiled limit.
    limits = {t.numerator: t.limit for t in report.TARGETS if t.denominator is None}
    assert limits[("neuron_compiled", "compiled_in_process", "train_ratio")] == 1.05
    assert limits[("neuron_compiled", "compiled_in_process", "loop_ratio")] == 1.05


def test_a_one_process_row_refuses_a_ratio_when_a_processs_two_sides_computed_different_things():
    """A process whose two sides decoded other tokens (or reached another loss) compared different
    work: its row gives no ratio and says why, for the eager and the compiled one-process rows
    alike; rows whose processes all agreed still give theirs, and an undecided one-process row
    counts the processes, not pairs, it would need."""
    def process(workload, repeat, ratios, **same):
        return {"backend": "neuron_compiled" if workload == "compiled_in_process" else "neuron",
                "workload": workload, "status": "ok", "repeat": repeat,
                "metrics": {f"{what}_ratio": ratio for what, ratio in ratios.items()},
                "info": {what: {name: value, "ratio_interval": [0.9, 1.1]} for what, (name, value) in same.items()}}

    results = [process("decode_in_process", 0, {"loop": 1.0, "generate": 1.0},
                       loop=("same_tokens", True), generate=("same_tokens", True)),
               process("decode_in_process", 1, {"loop": 1.1, "generate": 1.0},
                       loop=("same_tokens", False), generate=("same_tokens", True)),
               process("compiled_in_process", 0, {"train": 1.0, "loop": 1.0},
                       train=("same_loss", False), loop=("same_tokens", True)),
               process("compiled_in_process", 1, {"train": 1.0, "loop": 1.08},
                       train=("same_loss", True), loop=("same_tokens", True))]
    targets = {t["label"]: t for t in report.ratios(report.summarize(results), results)}
    eager_loop = targets["per-token latency, manual decode loop, both devices in one process: neuron / CPU"]
    compiled_train = targets["training step, steady state, both backends in one process: "
                             "neuron compiled / CPU Inductor"]
    for target, what in ((eager_loop, "tokens"), (compiled_train, "loss")):
        assert target["ratio"] is None and target["verdict"] is None
        assert target["missing"] == (f"refused: the two sides' {what} differed in 1 of 2 processes, "
                                     "so their times compare different work")
    generate = targets["static-cache generate(), per token, both devices in one process: neuron / CPU"]
    assert generate["ratio"] == pytest.approx(1.0) and generate["verdict"] == "met"
    compiled_loop = targets["per-token latency, compiled decode loop, both backends in one process: "
                            "neuron compiled / CPU Inductor"]
    assert compiled_loop["pairs"] == 2 and compiled_loop["verdict"] == "undecided"
    meta = {"size": "smoke", "pairs": 2, "compiled_pairs": 2, "threads": 1, "date": "d", "wall_s": 1.0,
            "machine": report.machine(), "load_start": "0", "load_end": "0", "versions": "v"}
    rows = report.summarize(results)
    page = report.markdown(rows, report.ratios(rows, results), meta, results)
    more = compiled_loop["pairs_to_decide"] - 2
    assert f"| {compiled_loop['label']} | 1.04× |" in page and f"undecided (≈ {more} more processes) |" in page
    assert f"| {eager_loop['label']} | n/a (refused: the two sides' tokens differed in 1 of 2 processes" in page


def test_decode_op_table_profiles_the_same_ops_on_both_devices():
    """``python -m tools.decode_ops``: the same generate() on CPU and neuron runs the same
    matmuls per token; every op of either device is a row, the table names the ratio per op."""
    from tools import decode_ops

    result = decode_ops.measure("smoke", rounds=1)
    rows = {r["op"]: r for r in result["rows"]}
    mm = rows["aten::mm"]
    assert mm["cpu_calls_per_token"] == mm["neuron_calls_per_token"] > 0
    assert mm["cpu_us_per_call"] > 0 and mm["neuron_us_per_call"] > 0
    assert result["tokens"] == decode_ops.SIZES["smoke"].new_tokens
    text = decode_ops.markdown(result, limit=3)
    # Three op rows (the ops that add most on neuron: not always aten:: ones, e.g. a profiler
    # range can rank among them on a noisy run), then the row outside ATen ops.
    assert text.count("\n| `") == 3 and "outside ATen ops" in text


def test_decode_replay_runs_every_call_by_itself_with_the_same_result_on_both_devices():
    """``python -m tools.decode_ops --replay``: every distinct call of the decode replays on
    both devices from its recorded arguments and gives CPU's result; per-token call counts are the
    model's (a Llama layer has seven projections, plus the LM head, per forward)."""
    import torch_neuronx  # noqa: F401

    from tools import decode_ops

    result = decode_ops.replay("smoke", loops=2)
    assert result["failed"] == {} and result["differing"] == []
    rows = {r["op"]: r for r in result["rows"]}
    assert rows["aten.mm.default"]["calls_per_token"] == 7 * decode_ops.SIZES["smoke"].layers + 1
    assert all(r["cpu_ns"] > 0 and r["cpu_ns"] + r["added_ns"] > 0 for r in rows.values())
    assert "Results differ" not in decode_ops.markdown_replay(result, limit=3)
    # The comparison can fail: two independent random draws differ.
    draw = torch.ops.aten.randn.default
    assert not decode_ops._same_result(draw, (([64],), {}), (([64],), {"device": torch.device("neuron")}))


def test_summarize_pools_samples_across_repeats_and_keeps_failures():
    results = [
        {"backend": "cpu", "workload": "train", "status": "ok", "repeat": 0,
         "metrics": {"steady_step_ms": [10.0, 30.0], "first_step_ms": 50.0, "compilations": None}},
        {"backend": "cpu", "workload": "train", "status": "ok", "repeat": 1,
         "metrics": {"steady_step_ms": [20.0], "first_step_ms": 70.0, "compilations": None}},
        {"backend": "neuron", "workload": "train", "status": "ok", "repeat": 0,
         "metrics": {"steady_step_ms": [11.0, 12.0, 13.0], "first_step_ms": 90.0, "compilations": 7}},
        {"backend": "neuron_compiled", "workload": "train", "status": "error", "reason": "boom", "repeat": 0},
    ]
    rows = {(r["backend"], r["metric"]): r for r in report.summarize(results)}
    steady = rows[("cpu", "steady_step_ms")]
    assert (steady["median"], steady["min"], steady["max"], steady["n"], steady["unit"]) == (20.0, 10.0, 30.0, 3, "ms")
    assert rows[("cpu", "first_step_ms")]["median"] == 60.0
    assert ("cpu", "compilations") not in rows  # None means "no such notion", not zero
    assert rows[("neuron", "compilations")]["unit"] == "count"
    failed = rows[("neuron_compiled", None)]
    assert failed["status"] == "error" and failed["reason"] == "boom" and failed["median"] is None

    # The one round with both sides pairs neuron's 12 with that round's CPU median, 20.
    targets = {t["label"]: t for t in report.ratios(list(rows.values()), results)}
    steady_target = targets["training step, steady state: neuron eager / CPU eager"]
    assert steady_target["pair_ratios"] == [pytest.approx(12.0 / 20.0)] and steady_target["pairs"] == 1
    compiled = targets["training step, steady state: neuron compiled / CPU Inductor"]
    assert compiled["ratio"] is None and "neuron_compiled/train" in compiled["missing"]


def test_a_failing_cell_is_reported_once_and_not_run_again(tmp_path):
    """A worker that fails (here: a workload no worker knows) becomes an error cell in the
    results and on the page; its later rounds are skipped, the other cells still run."""
    steps = [Step(0, "no_such_workload", "cpu"), Step(1, "no_such_workload", "cpu")]
    lines = []
    results = run_suite(steps, "smoke", tmp_path, timeout=240, log=lines.append)
    assert [r["status"] for r in results] == ["error"] and "KeyError" in results[0]["reason"]
    assert "skipped" in lines[1] and len(lines) == 2
    rows = report.summarize(results)
    assert rows == [dict(zip(report.ROW_FIELDS, ("cpu", "no_such_workload", None, None, None, None, None, 0,
                                                 "error", results[0]["reason"], "cold")))]
    meta = {"size": "smoke", "pairs": 2, "compiled_pairs": 1, "threads": None, "date": "d", "wall_s": 1.0,
            "machine": report.machine(), "load_start": "0", "load_end": "0", "versions": "v"}
    page = report.markdown(rows, report.ratios(rows, results), meta, results)
    assert f"- cpu / no_such_workload: error — {results[0]['reason']}" in page


def test_decoding_with_kernel_accounting_off_runs_and_projects_nothing(tmp_path):
    """``neuron_noacct`` records no kernels, so there is no device work to project: its
    ``generate`` cell is measured without projected rows (it divided by a zero projection)."""
    result = run_worker(BY_NAME["neuron_noacct"], "generate", "smoke", 240, tmp_path / "log")
    assert result["status"] == "ok", (tmp_path / "log").read_text()[-2000:]
    assert result["metrics"]["per_token_ms"] and not [m for m in result["metrics"] if m.startswith("projected_")]


def test_every_measured_op_and_per_token_row_has_its_limit():
    """The suite's targets: each op the ``ops`` workload times is a per-op row with a limit of
    1.15x CPU eager (its wall clock; its thread-CPU-time row is context, without a limit); both per-token rows of the manual decode loop have a limit of 1.05x."""
    from benchmarks.adapters import make_adapter
    from benchmarks.model import SMOKE

    measured = WORKLOADS["ops"](make_adapter("cpu"), SMOKE)["metrics"]
    assert {"add_us", "mul_us", "fill_us"} <= set(measured)
    limits = {(t.numerator, t.denominator): t.limit for t in report.TARGETS}
    wall = [metric for metric in measured if not metric.endswith("_thread_us")]
    assert {metric.replace("_thread_us", "_us") for metric in set(measured) - set(wall)} <= set(wall)
    for metric in measured:
        limit = limits.get((("neuron", "ops", metric), ("cpu", "ops", metric)), "no row")
        assert limit == (1.15 if metric in wall else None), metric
    assert limits[(("neuron", "generate", "per_token_ms"), ("cpu", "generate", "per_token_ms"))] == 1.05
    assert limits[(("neuron_compiled", "generate", "per_token_ms"),
                   ("cpu_inductor", "generate", "per_token_ms"))] == 1.05


def test_only_rejects_unknown_names_and_splits_backends_from_workloads():
    assert parse_only("neuron,ops") == (["neuron"], ["ops"])
    backends, workloads = parse_only("train")
    assert "xla" in backends and workloads == ["train"]
    with pytest.raises(SystemExit, match="unknown name.*nueron"):
        parse_only("nueron,train")


def test_worker_reports_missing_torch_xla_instead_of_failing():
    result = worker.run("xla", "ops", "smoke")
    assert result["status"] == "unavailable" and "torch_xla" in result["reason"]
    with pytest.raises(ValueError, match="unknown backend"):
        worker.run("tpu", "ops", "smoke")


def test_runner_turns_a_hung_worker_into_a_timeout_cell(tmp_path):
    result = run_worker(BY_NAME["cpu"], "train", "smoke", timeout=0.05, log_path=tmp_path / "log")
    assert result["status"] == "timeout" and "0 s" in result["reason"]
