"""The benchmark's paired design and its statistics, on hand-made pairs (no process, no timing).

The suite's limits are decided from pairs of processes: the reference and the subject of one
workload run back to back, which goes first alternating (ABBA); each pair gives one ratio of the
two processes' own medians; the report gives the ratios' geometric mean, a 95 % Student t
interval on their logarithms and a verdict. Compiled backends compile cold once per workload and
run warm (reusing that process's caches) after it; rows and pairs keep the two states apart.
The expected figures here are computed by hand or from textbook t quantiles, never by the code
under test.
"""
from __future__ import annotations

import math

import pytest

from benchmarks import report, stats
from benchmarks.backends import BY_NAME, ROUND_ORDER
from benchmarks.runner import Step, plan

pytestmark = pytest.mark.fast

# Two-sided 95 % Student t quantiles from a printed table (df: t_0.975).
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 9: 2.262, 19: 2.093, 30: 2.042, 120: 1.980}


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_the_printed_table(df):
    assert stats.t_quantile(0.975, df) == pytest.approx(T_TABLE[df], abs=6e-4)


def test_t_quantile_rejects_a_lower_tail_or_no_degrees_of_freedom():
    with pytest.raises(ValueError, match="0.5 < p < 1"):
        stats.t_quantile(0.2, 3)
    with pytest.raises(ValueError, match="df >= 1"):
        stats.t_quantile(0.975, 0)


def test_geometric_mean_and_interval_of_hand_made_pairs():
    # log-ratios ±0.1 around log 1.1: geometric mean 1.1 exactly; sd of (+.1, -.1, +.1, -.1) is
    # sqrt(4 * 0.01 / 3); half-width t(3) * sd / 2.
    ratios = [1.1 * math.exp(d) for d in (0.1, -0.1, 0.1, -0.1)]
    paired = stats.paired_ratio(ratios)
    half = T_TABLE[3] * math.sqrt(0.04 / 3) / 2
    assert paired.pairs == 4
    assert paired.geometric_mean == pytest.approx(1.1)
    assert paired.low == pytest.approx(1.1 * math.exp(-half), rel=1e-3)
    assert paired.high == pytest.approx(1.1 * math.exp(half), rel=1e-3)
    assert paired.low < paired.geometric_mean < paired.high
    # A ratio and its inverse average to 1 on the log scale (an arithmetic mean would not).
    assert stats.paired_ratio([2.0, 0.5]).geometric_mean == pytest.approx(1.0)


def test_verdicts_for_a_clearly_met_a_clearly_missed_and_an_undecided_limit():
    met = stats.paired_ratio([1.00, 1.02, 0.99, 1.01, 1.00, 1.03, 0.98, 1.01, 1.00, 1.02])
    assert met.high < 1.15 and met.verdict(1.15) == "met"
    missed = stats.paired_ratio([1.40, 1.42, 1.38, 1.41, 1.39, 1.43, 1.40, 1.37, 1.41, 1.40])
    assert missed.low > 1.15 and missed.verdict(1.15) == "not met"
    wide = stats.paired_ratio([0.9, 1.4, 1.0, 1.3, 1.1, 1.25, 0.95, 1.35, 1.05, 1.2])
    assert wide.low < 1.15 < wide.high and wide.verdict(1.15) == "undecided"
    assert met.verdict(None) is None  # a context row has no limit


def test_pairs_to_decide_is_the_first_count_whose_interval_clears_the_limit():
    wide = stats.paired_ratio([0.9, 1.4, 1.0, 1.3, 1.1, 1.25, 0.95, 1.35, 1.05, 1.2])
    needed = wide.pairs_to_decide(1.15)
    distance = abs(math.log(wide.geometric_mean) - math.log(1.15))

    def half_width(n):
        return stats.t_quantile(0.975, n - 1) * wide.log_sd / math.sqrt(n)

    assert needed > wide.pairs
    assert half_width(needed) < distance <= half_width(needed - 1)
    # One pair has no interval, so no estimate; a mean on the limit never decides.
    assert stats.paired_ratio([1.2]).pairs_to_decide(1.15) is None
    assert stats.paired_ratio([1.0, 1.0]).pairs_to_decide(1.0) is None


def test_one_pair_has_no_interval_and_is_undecided():
    single = stats.paired_ratio([1.01])
    assert (single.low, single.high, single.log_sd) == (None, None, None)
    assert single.verdict(1.15) == "undecided"
    with pytest.raises(ValueError, match="positive"):
        stats.paired_ratio([1.0, 0.0])


def test_rounds_alternate_which_side_runs_first_abba():
    steps = plan(["cpu", "neuron"], ["ops"], pairs=4, compiled_pairs=4)
    assert [(s.repeat, s.backend) for s in steps] == [
        (0, "cpu"), (0, "neuron"), (1, "neuron"), (1, "cpu"),
        (2, "cpu"), (2, "neuron"), (3, "neuron"), (3, "cpu")]


def test_each_workloads_processes_run_back_to_back_and_compiled_ones_in_fewer_rounds():
    backends = ["cpu", "neuron", "cpu_inductor", "neuron_compiled"]
    steps = plan(backends, ["train", "ops"], pairs=3, compiled_pairs=2)
    cells = [(s.repeat, s.workload) for s in steps]
    # Within a round a workload's processes are contiguous: no other workload between a pair.
    for repeat in range(3):
        workloads = [w for r, w in cells if r == repeat]
        assert workloads == sorted(workloads, key=["train", "ops"].index)
    compiled = [s for s in steps if BY_NAME[s.backend].graph_compile]
    assert {s.repeat for s in compiled} == {0, 1} and {s.workload for s in compiled} == {"train"}
    assert len([s for s in steps if s.backend == "cpu"]) == 6  # train and ops, three rounds
    # Each limit's reference and subject are neighbours in a round.
    for target in report.TARGETS:
        if target.limit is not None and target.numerator[1] in ("ops", "train", "generate", "generate_static"):
            reference, subject = target.denominator[0], target.numerator[0]
            if "xla" not in (reference, subject):
                assert abs(ROUND_ORDER.index(reference) - ROUND_ORDER.index(subject)) == 1, target.label


def test_compiled_backends_run_cold_in_round_one_then_warm_in_abba_pairs():
    # Both sides of the compiled comparison alike: cold together in round one, warm together after,
    # and the order still alternating.
    assert plan(["cpu_inductor", "neuron_compiled"], ["train"], pairs=3, compiled_pairs=3) == [
        Step(0, "train", "cpu_inductor", warm=False), Step(0, "train", "neuron_compiled", warm=False),
        Step(1, "train", "neuron_compiled", warm=True), Step(1, "train", "cpu_inductor", warm=True),
        Step(2, "train", "cpu_inductor", warm=True), Step(2, "train", "neuron_compiled", warm=True)]
    # Eager backends and PyTorch/XLA (whose compile cache is not kept) are cold in every round.
    steps = plan(["cpu", "neuron", "xla"], ["train"], pairs=3, compiled_pairs=2)
    assert [(s.repeat, s.backend) for s in steps if s.backend == "xla"] == [(0, "xla"), (1, "xla")]
    assert steps and not any(s.warm for s in steps)
    # Each workload has its own cold round: a generate cache is not warmed by train.
    both = plan(["cpu_inductor"], ["train", "generate"], pairs=2, compiled_pairs=2)
    assert [(s.workload, s.cache) for s in both] == [
        ("train", "cold"), ("generate", "cold"), ("train", "warm"), ("generate", "warm")]


def _compiled(backend, repeat, cache, first, steady):
    return {"backend": backend, "workload": "train", "status": "ok", "repeat": repeat, "cache": cache,
            "metrics": {"first_step_ms": first, "steady_step_ms": steady}}


def test_rows_and_pairs_keep_cold_and_warm_processes_apart():
    results = [_compiled("cpu_inductor", 0, "cold", 60_000.0, [100.0]),
               _compiled("neuron_compiled", 0, "cold", 70_000.0, [110.0]),
               _compiled("neuron_compiled", 1, "warm", 15_000.0, [105.0]),
               _compiled("cpu_inductor", 1, "warm", 5_000.0, [100.0]),
               _compiled("cpu_inductor", 2, "warm", 6_000.0, [100.0]),
               _compiled("neuron_compiled", 2, "warm", 16_000.0, [100.0])]
    results += [{"backend": "xla", "workload": "train", "status": "ok", "repeat": r,
                 "metrics": {"first_step_ms": 3_500.0}} for r in range(3)]  # no cache field: cold
    rows = report.summarize(results)
    cells = {(r["backend"], r["metric"], r["cache"]): (r["median"], r["n"]) for r in rows}
    # The first-compile figure is the cold process's alone; warm first steps are a row of their own.
    assert cells[("neuron_compiled", "first_step_ms", "cold")] == (70_000.0, 1)
    assert cells[("neuron_compiled", "first_step_ms", "warm")] == (15_500.0, 2)
    assert cells[("cpu_inductor", "steady_step_ms", "warm")] == (100.0, 2)
    targets = {t["label"]: t for t in report.ratios(rows, results)}
    steady = targets["training step, steady state: neuron compiled / CPU Inductor"]
    # Every round pairs two processes of one state: one cold pair, two warm ones.
    assert steady["pair_ratios"] == pytest.approx([1.10, 1.05, 1.00])
    assert (steady["pairs"], steady["warm_pairs"]) == (3, 2)
    # A warm first step against XLA's cold one is no pair: only round one's.
    first = targets["time to first step: neuron compiled / PyTorch-XLA"]
    assert first["pair_ratios"] == pytest.approx([70_000 / 3_500]) and first["warm_pairs"] == 0

    meta = {"size": "full", "pairs": 3, "compiled_pairs": 3, "threads": 1, "date": "d", "wall_s": 1.0,
            "machine": {"cpu": "c", "cores": 2, "memory_gib": 1, "os": "o", "python": "3"},
            "load_start": "0", "load_end": "0", "versions": "v"}
    page = report.markdown(rows, list(targets.values()), meta, results).splitlines()
    assert f"| {steady['label']} | 1.05× | {steady['low']:.2f}–{steady['high']:.2f} | 3 (2 warm) | ≤ 1.05× " \
           f"| {report._verdict(steady)} |" in page
    assert "| first_step_ms [ms] | 60000 | 70000 | 3500 |" in page
    assert "| first_step_ms, warm cache [ms] | 5500 (5000–6000) | 15500 (15000–16000) | – |" in page
    caches = next(line for line in page if line.startswith("- caches:"))
    assert "warm ones of cpu_inductor, neuron_compiled:" in caches


def _process(backend, repeat, value, metric="steady_step_ms", run=0):
    return {"backend": backend, "workload": "train", "status": "ok", "repeat": repeat, "run": run,
            "metrics": {metric: value}}


def test_target_ratios_pair_the_processes_of_one_round():
    # Round 0 is a slow moment, round 1 a fast one: paired, each ratio is 1.1; pooled or crossed,
    # the rounds would give 2.2 and 0.55.
    results = [_process("cpu", 0, [20.0, 20.0]), _process("neuron", 0, [22.0, 22.0]),
               _process("neuron", 1, [11.0]), _process("cpu", 1, [10.0, 9.0, 11.0])]
    rows = report.summarize(results)
    targets = {t["label"]: t for t in report.ratios(rows, results)}
    steady = targets["training step, steady state: neuron eager / CPU eager"]
    assert steady["pair_ratios"] == pytest.approx([1.1, 1.1])
    assert steady["ratio"] == pytest.approx(1.1) and steady["pairs"] == 2
    assert steady["low"] == pytest.approx(1.1) and steady["high"] == pytest.approx(1.1)
    assert steady["verdict"] == "not met" and steady["warm_pairs"] == 0  # limit 1.03
    compiled = targets["training step, steady state: neuron compiled / CPU Inductor"]
    assert compiled["ratio"] is None and "neuron_compiled/train" in compiled["missing"]


def test_sides_from_different_runs_are_unpaired_and_undecided():
    results = [_process("cpu", 0, [20.0], run=0), _process("neuron", 0, [19.0], run=1)]
    steady = next(t for t in report.ratios(report.summarize(results), results)
                  if t["label"] == "training step, steady state: neuron eager / CPU eager")
    assert steady["ratio"] == pytest.approx(0.95) and steady["pairs"] == 0
    assert steady["low"] is None and steady["verdict"] == "undecided"


def test_the_targets_table_shows_interval_pairs_and_verdict():
    results = [_process("cpu", r, [10.0]) for r in range(3)]
    results += [_process("neuron", r, [v]) for r, v in enumerate((10.0, 11.0, 12.0))]
    rows = report.summarize(results)
    targets = report.ratios(rows, results)
    meta = {"size": "full", "pairs": 3, "compiled_pairs": 3, "threads": 1, "date": "d", "wall_s": 1.0,
            "machine": {"cpu": "c", "cores": 2, "memory_gib": 1, "os": "o", "python": "3"},
            "load_start": "0", "load_end": "0", "versions": "v"}
    page = report.markdown(rows, targets, meta, results)
    steady = next(t for t in targets if t["label"].startswith("training step, steady state: neuron eager /"))
    line = next(line for line in page.splitlines() if line.startswith(f"| {steady['label']} |"))
    more = steady["pairs_to_decide"] - 3
    assert line == (f"| {steady['label']} | {steady['ratio']:.2f}× | {steady['low']:.2f}–{steady['high']:.2f} "
                    f"| 3 | ≤ 1.03× | undecided (≈ {more} more pair{'s' if more > 1 else ''}) |")
    assert "host measurement" in page


def test_limits_preset_refuses_only_and_pair_counts_must_be_positive(capsys, tmp_path):
    from benchmarks.__main__ import main

    # Were a bad count accepted, the smoke run of one small cell would finish instead of exiting.
    tiny = ["--smoke", "--only", "cpu,ops", "--out", str(tmp_path)]
    for argv, message in ((["--limits", "--only", "cpu,ops"], "leave out --only"),
                          (["--pairs", "0", *tiny], "--pairs, --compiled-pairs"),
                          (["--compiled-pairs", "0", *tiny], "--pairs, --compiled-pairs"),
                          (["--timeout", "0", *tiny], "--timeout > 0")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
