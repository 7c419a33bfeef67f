"""``torchneuron plan --validate``: the projection against AWS's published Trainium results.

Each published row is planned once in its own layout (traced on fake tensors) and its work
cached in ``projection/published_work.json``; the fit and the leave-one-out error run on that
cache (``projection.fit``). The table is printed; it is written into a document (between
generated-section markers) only when one is named, and the package's work and factors files
are rewritten only by ``--retrace``: a plain ``--validate`` changes nothing, anywhere.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from ..projection import fit, published
from ..runtime.errors import UsageError
from .planner import Planner
from .request import Layout
from .work import serving_work, training_work

BEGIN = "<!-- BEGIN GENERATED: torchneuron plan --validate -->"
END = "<!-- END GENERATED: torchneuron plan --validate -->"


def row_planner(row: published.PublishedRow) -> tuple[Planner, Layout]:
    """The planner and layout of a published row."""
    lay = row.layout
    if row.kind == "training":
        planner = Planner(row.model, row.instance, lay["seq_len"], "train", lay["precision"])
        layout = Layout(lay["tp"], lay["dp"], lay["micro_batch"], False, planner.profile.default_lnc, row.instances,
                        pp=lay["pp"], shard=lay["shard"], global_batch=lay["global_batch"],
                        sequence_parallel=lay["sequence_parallel"])
    else:
        planner = Planner(row.model, row.instance, lay["input_len"], "infer", lay["precision"], lay.get("output_len"),
                          max_len=lay.get("max_len"), weight_dtype=lay.get("weight_dtype"),
                          attention=lay.get("attention"))
        layout = Layout(lay["tp"], 1, lay["batch_size"], False, lay["lnc"], row.instances,
                        sequence_parallel=lay.get("sequence_parallel", False))
    planner.check(layout)
    return planner, layout


def trace_rows(rows: list[published.PublishedRow]) -> dict:
    works = {}
    for row in rows:
        planner, layout = row_planner(row)
        works[row.id] = (training_work if row.kind == "training" else serving_work)(planner.ctx, layout)[0]
    return works


def _shape(r: published.PublishedRow) -> str:
    lay = r.layout
    if r.kind == "training":
        return f"{r.instances}×{r.instance}, TP {lay['tp']} / PP {lay['pp']} / DP {lay['dp']}, seq {lay['seq_len']}"
    if r.kind == "encoder":
        return f"{r.instance}, TP {lay['tp']}, batch {lay['batch_size']} × {lay['input_len']}"
    extra = "".join(text for key, text in (("max_len", f", max {lay.get('max_len')}"),
                                           ("weight_dtype", f", {lay.get('weight_dtype')} weights"),
                                           ("sequence_parallel", ", sequence parallel"),
                                           ("attention", f", {lay.get('attention')} attention")) if lay.get(key))
    return f"{r.instance}, TP {lay['tp']}, batch {lay['batch_size']}, {lay['input_len']} in / {lay['output_len']} out{extra}"


def table_markdown(factors, table: list[fit.ValidationRow], rows: list[published.PublishedRow]) -> str:
    by_id = {r.id: r for r in rows}
    lines = ["| row | model | layout | figure | published | projected (fit on all) | error | "
             "leave-one-out projected | leave-one-out error |", "|---|---|---|---|---|---|---|---|---|"]
    for v in table:
        r = by_id[v.row]
        lines.append(f"| [{v.row}]({r.source}) | {r.model} | {_shape(r)} | {v.figure} | {v.published:.4g} s | "
                     f"{v.projected:.4g} s | {v.error:+.1%} | {v.left_out:.4g} s | {v.left_out_error:+.1%} |")
    loo = sorted(abs(v.left_out_error) for v in table)
    fitted = sorted(abs(v.error) for v in table)
    lines += ["", f"Fit on all rows: largest error {fitted[-1]:.1%}, median {statistics.median(fitted):.1%}. "
                  f"Leave-one-out: largest {loo[-1]:.1%}, median {statistics.median(loo):.1%} "
                  f"({len(rows)} rows, {len(table)} figures; compiled mode).", "",
              "| factor | fitted value | meaning |", "|---|---|---|"]
    for name, (_, _, _, meaning) in fit.BOUNDS.items():
        lines.append(f"| `{name}` | {getattr(factors, name):.4g} | {meaning} |")
    return "\n".join(lines)


def _doc_text(doc: Path) -> str:
    """The document's text, checked to hold the generated-section markers."""
    try:
        text = doc.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {doc}: {exc.strerror or exc} (pass --docs PATH, or --docs '' to skip)") \
            from None
    if BEGIN not in text or END not in text:
        raise UsageError(f"{doc} has no generated-section markers ({BEGIN} … {END})")
    return text


def write_docs(markdown: str, doc: Path) -> None:
    head, rest = _doc_text(doc).split(BEGIN, 1)
    doc.write_text(head + BEGIN + "\n" + markdown + "\n" + END + rest.split(END, 1)[1], encoding="utf-8")


def validate(retrace: bool = False, doc: Path | None = None):
    """Fit and the print-ready table; ``retrace``: trace the rows again and keep their work and the
    fitted factors in the package; ``doc``: write the table into that document."""
    if doc is not None:
        _doc_text(doc)  # a bad document is one line, before anything is traced or written
    rows = published.published_rows()
    if retrace:
        published.save_work(trace_rows(rows))
    works = published.load_work()
    factors, table = fit.validate(rows, works)
    if retrace:
        fit.write_factors(factors, table, rows)
    markdown = table_markdown(factors, table, rows)
    if doc is not None:
        write_docs(markdown, doc)
    return factors, table, markdown
