"""Paired ratios: their geometric mean, a 95 % confidence interval and a verdict against a limit.

Why pairs: one build's time moves ±10–15 % from process to process (memory layout), more than
the gaps the limits are about. A reference process and its subject run back to back share the
machine's state, so their ratio cancels most of that, and the spread of many such ratios says
how far the mean can be trusted. Why logs: timing noise is multiplicative, so the interval is a
Student t interval on the log-ratios, exponentiated (geometric mean and bounds). The venv has no
SciPy, so the t quantile integrates the t density here.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

CONFIDENCE = 0.95
_UPPER = (1 + CONFIDENCE) / 2  # the two-sided interval's upper quantile
_SIMPSON_STEPS = 400  # even; the density is smooth: quantiles right to 1e-6 for df >= 1


def _t_density(x: float, df: int) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))


def _t_mass_from_zero(x: float, df: int) -> float:
    """P(0 < T < x) by Simpson's rule."""
    h = x / _SIMPSON_STEPS
    inner = sum((4 if i % 2 else 2) * _t_density(i * h, df) for i in range(1, _SIMPSON_STEPS))
    return h / 3 * (_t_density(0.0, df) + inner + _t_density(x, df))


@lru_cache(maxsize=None)
def t_quantile(p: float, df: int) -> float:
    """Student t quantile for 0.5 < p < 1 (bisection on the distribution function)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    wanted = p - 0.5
    low, high = 0.0, 1.0
    while _t_mass_from_zero(high, df) < wanted:
        low, high = high, high * 2
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_mass_from_zero(middle, df) < wanted else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class PairedRatio:
    """The ratios of ``pairs`` pairs of processes, summarised on the log scale."""

    pairs: int
    geometric_mean: float
    low: float | None  # the 95 % interval; None with fewer than two pairs
    high: float | None
    log_sd: float | None  # sample standard deviation of the log-ratios

    def verdict(self, limit: float | None) -> str | None:
        """"met" when the whole interval is at or under ``limit``, "not met" when all of it is
        above, "undecided" otherwise (or with no interval); None for a row without a limit."""
        if limit is None:
            return None
        if self.high is not None and self.high <= limit:
            return "met"
        if self.low is not None and self.low > limit:
            return "not met"
        return "undecided"

    def pairs_to_decide(self, limit: float) -> int | None:
        """How many pairs in all would decide ``limit`` if further pairs kept this mean and spread:
        the smallest n with t(n-1) · sd / √n below the distance of the mean from the limit.
        None when that cannot be estimated (fewer than two pairs, or the mean on the limit)."""
        distance = abs(math.log(self.geometric_mean) - math.log(limit))
        if self.log_sd is None or distance == 0:
            return None

        def decides(n: int) -> bool:
            return t_quantile(_UPPER, n - 1) * self.log_sd / math.sqrt(n) < distance

        low, high = 1, 2  # decides(low) is false (one pair has no interval); find a high that decides
        while not decides(high):
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if decides(middle) else (middle, high)
        return high


def paired_ratio(ratios: list[float]) -> PairedRatio:
    """Geometric mean and 95 % t interval of positive ratios, one per pair of processes."""
    if not ratios or min(ratios) <= 0:
        raise ValueError(f"paired_ratio needs at least one ratio, all positive: {ratios}")
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return PairedRatio(len(logs), math.exp(mean), None, None, None)
    sd = statistics.stdev(logs)
    half = t_quantile(_UPPER, len(logs) - 1) * sd / math.sqrt(len(logs))
    return PairedRatio(len(logs), math.exp(mean), math.exp(mean - half), math.exp(mean + half), sd)
