"""Fitting the few physical factors of ``job.Factors`` on AWS's published results, and the
leave-one-out error: each row predicted by factors fitted on the other rows.

The objective is the sum of squared log ratios (projected / published) over every published
figure, plus a weak pull of each factor toward its documented default so that a factor the
remaining rows cannot see (leave-one-out) stays at a physical value instead of drifting.
Minimised by Nelder–Mead over bounded transforms of the factors: evaluating a row is a handful
of float operations on its cached work, so a fit takes well under a second.
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Callable

import numpy as np

from .job import FACTORS_FILE, Factors, TrainingWork, clear_cache, training_time
from .published import PublishedRow
from .serving import EncoderTime, EncoderWork, InferenceWork, serving_time

# factor → (lowest, highest, default, meaning); latencies are fitted on a log scale
BOUNDS = {
    "tensor_efficiency": (0.05, 1.0, 0.5, "achieved / peak TensorE FLOP/s inside a compiled graph (matmul "
                          "tiling, pipeline fill, engines waiting on each other)"),
    "hbm_efficiency": (0.05, 1.0, 0.8, "achieved / peak HBM bandwidth for a graph's own traffic"),
    "link_efficiency": (0.05, 1.0, 0.8, "achieved / peak bandwidth of collectives and pipeline sends inside "
                        "an instance (on chip, NeuronLink: a ring uses one of a chip's links, not all)"),
    "launch_seconds": (1e-6, 1e-3, 3e-5, "fixed cost of launching one compiled graph (and the host's share "
                       "of each step)"),
    "collective_step_seconds": (1e-7, 1e-4, 5e-6, "latency of one step of a ring or tree collective"),
    "spill_fraction": (0.0, 1.0, 0.5, "share of the eager kernels' intermediate HBM traffic a compiled graph "
                       "still moves (what the compiler does not keep in SBUF)"),
    "efa_efficiency": (0.05, 1.0, 0.8, "achieved / peak EFA bandwidth of collectives between instances"),
}
_LOG = {"launch_seconds", "collective_step_seconds"}
PRIOR_WEIGHT = 0.01


def _to_factors(x: np.ndarray) -> Factors:
    values = {}
    for xi, (name, (lo, hi, _, _)) in zip(x, BOUNDS.items()):
        s = 1 / (1 + math.exp(-xi))
        values[name] = math.exp(math.log(lo) + s * (math.log(hi) - math.log(lo))) if name in _LOG \
            else lo + s * (hi - lo)
    return Factors(**values)


def _from_factors(f: Factors) -> np.ndarray:
    x = []
    for name, (lo, hi, _, _) in BOUNDS.items():
        v = getattr(f, name)
        s = (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) if name in _LOG else (v - lo) / (hi - lo)
        s = min(max(s, 1e-6), 1 - 1e-6)
        x.append(math.log(s / (1 - s)))
    return np.array(x)


DEFAULTS = Factors(**{name: b[2] for name, b in BOUNDS.items()})


def predict(work: TrainingWork | InferenceWork | EncoderWork, f: Factors) -> dict[str, float]:
    """The projected figures a published row states, in seconds."""
    if isinstance(work, TrainingWork):
        return {"step_seconds": training_time(work, f).step_seconds}
    t = serving_time(work, f)
    if isinstance(t, EncoderTime):
        return {"latency_seconds": t.latency_seconds}
    return {"ttft_seconds": t.ttft_seconds, "tpot_seconds": t.tpot_seconds}


def _nelder_mead(fun: Callable[[np.ndarray], float], x0: np.ndarray, iterations: int = 3000) -> np.ndarray:
    n = len(x0)
    simplex = [x0] + [x0 + np.eye(n)[i] for i in range(n)]
    values = [fun(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-12:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = fun(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = fun(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = fun(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink toward the best
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [fun(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit(rows: list[PublishedRow], works: dict, start: Factors = DEFAULTS) -> Factors:
    """The factors that best reproduce ``rows`` (their cached ``works``)."""
    prior = _from_factors(DEFAULTS)

    def loss(x: np.ndarray) -> float:
        f = _to_factors(x)
        total = PRIOR_WEIGHT * float(np.sum((x - prior) ** 2))
        for row in rows:
            projected = predict(works[row.id], f)
            total += sum(math.log(projected[k] / v) ** 2 for k, v in row.targets().items())
        return total

    x = _from_factors(start)
    for _ in range(3):  # restarts: Nelder–Mead stalls on the max() corners of the roofline
        x = _nelder_mead(loss, x)
    return _to_factors(x)


@dataclasses.dataclass(frozen=True)
class ValidationRow:
    row: str
    figure: str
    published: float
    projected: float  # with the factors fitted on all rows
    left_out: float  # with the factors fitted without this row

    @property
    def error(self) -> float:
        return self.projected / self.published - 1

    @property
    def left_out_error(self) -> float:
        return self.left_out / self.published - 1


def validate(rows: list[PublishedRow], works: dict) -> tuple[Factors, list[ValidationRow]]:
    """Fit on every row, then predict each row from a fit without it."""
    factors = fit(rows, works)
    table = []
    for row in rows:
        others = fit([r for r in rows if r.id != row.id], works, factors)
        full, held = predict(works[row.id], factors), predict(works[row.id], others)
        table += [ValidationRow(row.id, k, v, full[k], held[k]) for k, v in row.targets().items()]
    return factors, table


def write_factors(factors: Factors, table: list[ValidationRow], rows: list[PublishedRow]) -> None:
    """Keep the fitted factors, their meaning and the leave-one-out band in ``fitted_factors.json``."""
    loo = [abs(r.left_out_error) for r in table]
    figures = sorted({r.figure for r in table})
    by_figure = {f: {"max_abs_error": max(abs(r.left_out_error) for r in table if r.figure == f),
                     "rows": sum(r.figure == f for r in table)} for f in figures}
    data = {"schema": 1,
            "about": "Physical factors of the projection fitted on AWS's published Trainium results "
                     "(published_results.json) by `torchneuron plan --validate`; never edited by hand.",
            "fitted_on": [r.id for r in rows],
            "factors": {name: {"value": getattr(factors, name), "meaning": BOUNDS[name][3],
                               "bounds": list(BOUNDS[name][:2]), "default": BOUNDS[name][2]} for name in BOUNDS},
            "leave_one_out": {"max_abs_error": max(loo), "median_abs_error": statistics.median(loo),
                              "rows": len(rows), "figures": len(table), "by_figure": by_figure}}
    FACTORS_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    clear_cache()
