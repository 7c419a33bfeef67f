"""The projection against AWS's published Trainium results: the calibration rows (training,
decoder serving, encoder serving) within their fitted errors, the leave-one-out median within
12 %, the docs table and the factors file are the command's output, ``--validate`` changes no
file unless asked and runs anywhere, and the cached per-row work is what a fresh trace gives."""
from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from torch_neuronx.cli.main import main
from torch_neuronx.plan.validate import BEGIN, END, row_planner, table_markdown, validate
from torch_neuronx.plan.work import training_work
from torch_neuronx.projection import fit, published
from torch_neuronx.projection.job import FACTORS_FILE, fitted_factors

# Seconds of fits and traces needing nothing from other tests: in a child pytest on the background lane.
pytestmark = pytest.mark.child_process

DOC = Path(__file__).resolve().parents[2] / "docs" / "projection.md"


@pytest.fixture(scope="module")
def validation():
    return validate()


def test_published_rows_are_the_calibration_set_of_the_research_notes():
    rows = published.published_rows()
    assert [r.id for r in rows] == ["T1", "T2", "T3", "T4", "T5", "I1"] + [f"I{i}" for i in range(2, 11)]
    t1 = rows[0]
    assert t1.targets()["step_seconds"] == pytest.approx(1024 / 95.14)  # 10.76 s per 1024-sequence step
    assert t1.layout == {"tp": 8, "pp": 1, "dp": 64, "shard": "zero1", "seq_len": 4096, "micro_batch": 1,
                              "global_batch": 1024, "precision": "autocast-bf16", "sequence_parallel": True}
    assert rows[5].targets() == {"ttft_seconds": 0.8142, "tpot_seconds": 0.0196}
    i6 = next(r for r in rows if r.id == "I6")
    assert i6.layout["max_len"] == 8192 and i6.targets() == {"ttft_seconds": 0.8641, "tpot_seconds": 0.00984}
    assert next(r for r in rows if r.id == "I8").layout["weight_dtype"] == "int8"
    assert rows[-1].kind == "encoder" and rows[-1].targets() == {"latency_seconds": 0.00934}
    assert all(r.source.startswith("https://github.com/aws-neuron/aws-neuron-sdk/blob/") for r in rows)


def test_fit_within_40_percent_and_leave_one_out_median_within_12(validation):
    _, table, _ = validation
    assert len(table) == 23  # five training steps, eight TTFT and time-per-output-token pairs, two latencies
    worst = max(table, key=lambda v: abs(v.error))
    assert abs(worst.error) <= 0.40, worst
    assert statistics.median(abs(v.left_out_error) for v in table) <= 0.12
    assert max(abs(v.left_out_error) for v in table if v.figure == "tpot_seconds") <= 0.30


def test_docs_table_and_factors_file_are_the_command_output(validation):
    factors, table, markdown = validation
    text = DOC.read_text(encoding="utf-8")
    assert text.split(BEGIN, 1)[1].split(END, 1)[0].strip() == markdown.strip()
    assert dataclasses.asdict(fitted_factors()) == pytest.approx(dataclasses.asdict(factors), rel=1e-6)
    data = json.loads(FACTORS_FILE.read_text())
    loo = [abs(v.left_out_error) for v in table]
    assert data["leave_one_out"]["max_abs_error"] == pytest.approx(max(loo))
    assert all(data["factors"][name]["meaning"] for name in fit.BOUNDS)


def test_fit_recovers_factors_that_generated_the_figures(monkeypatch):
    """Figures made by known factors from the cached work: without the pull toward the defaults,
    the fit reproduces each within 1 %."""
    monkeypatch.setattr(fit, "PRIOR_WEIGHT", 0.0)
    works = published.load_work()
    truth = fit.Factors(tensor_efficiency=0.4, hbm_efficiency=0.7, link_efficiency=0.6, launch_seconds=5e-5,
                        collective_step_seconds=2e-6, efa_efficiency=0.5, engine_efficiency=0.3, engine_overlap=0.6,
                        op_seconds=2e-6)
    rows = []
    for row in published.published_rows():
        made = fit.predict(works[row.id], truth)
        if row.kind == "training":
            published_ = {"sequences_per_second": row.layout["global_batch"] / made["step_seconds"]}
        else:
            published_ = made
        rows.append(dataclasses.replace(row, published=published_))
    got = fit.fit(rows, works)
    for row in rows:
        for figure, value in fit.predict(works[row.id], got).items():
            assert value == pytest.approx(row.targets()[figure], rel=0.01), (row.id, figure)


def test_cached_work_of_t5_is_a_fresh_trace():
    row = next(r for r in published.published_rows() if r.id == "T5")
    planner, layout = row_planner(row)
    fresh, _ = training_work(planner.ctx, layout)
    cached = published.load_work()["T5"]
    fresh, cached = dataclasses.asdict(fresh), dataclasses.asdict(cached)
    for part in fresh:  # summation order may differ in the last bit
        pairs = fresh[part].items() if isinstance(fresh[part], dict) else [(None, fresh[part])]
        for key, value in pairs:
            expected = cached[part][key] if key else cached[part]
            assert value == (pytest.approx(expected, rel=1e-12) if isinstance(value, float) else expected), (part, key)


def test_cli_validate_writes_between_the_markers_and_refuses_a_doc_without_them(tmp_path, capsys):
    doc = tmp_path / "p.md"
    doc.write_text(f"intro\n{BEGIN}\nold\n{END}\nrest\n")
    assert main(["plan", "--validate", "--docs", str(doc)]) == 0
    out = capsys.readouterr().out
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("rest\n") and "old" not in text
    assert "[T1](" in text and "Leave-one-out" in out
    (tmp_path / "bare.md").write_text("no markers\n")
    assert main(["plan", "--validate", "--docs", str(tmp_path / "bare.md")]) == 2
    assert "generated-section markers" in capsys.readouterr().err


def test_table_markdown_lists_every_figure(validation):
    factors, table, _ = validation
    md = table_markdown(factors, table, published.published_rows())
    assert md.count("| step_seconds |") == 5 and md.count("| ttft_seconds |") == md.count("| tpot_seconds |") == 8
    assert md.count("| latency_seconds |") == 2


def test_cli_validate_prints_anywhere_and_changes_no_file(tmp_path, capsys, monkeypatch):
    """Outside the checkout (no docs/projection.md) it prints the table; it writes no document
    and neither the factors nor the work file of the package (they are written by --retrace)."""
    monkeypatch.chdir(tmp_path)
    before = {p: p.read_bytes() for p in (FACTORS_FILE, published.WORK_FILE, DOC)}
    assert main(["plan", "--validate"]) == 0
    assert "Leave-one-out" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in before} == before and not list(tmp_path.iterdir())
