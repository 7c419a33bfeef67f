"""Turns raw per-process results into rows, target ratios and a Markdown page.

Rows pool one metric's samples across repeated processes (median and min–max
spread, so noise on a shared machine stays visible). Targets are paired: each
process's own median is one observation, the subject's over its reference's of
the same round is one ratio, and ``stats`` gives their geometric mean, a 95 %
interval and a verdict against the limit.

A process's cache state (``cold``: empty caches; ``warm``: a compiled backend's
caches filled by its round-one process, ``runner``) is part of what it measured:
a first step from a warm cache compiles nothing. So rows pool the processes of
one state only, and a pair joins two processes of the same state; no metric has
to be declared cache-independent for that to hold.
"""
from __future__ import annotations

import os
import platform
import statistics
from dataclasses import dataclass

from . import stats
from .backends import BY_NAME, EAGER_WORKLOADS

ROW_FIELDS = ("backend", "workload", "metric", "unit", "median", "min", "max", "n", "status", "reason", "cache")
_UNITS = {"_ms": "ms", "_us": "µs", "_mb": "MiB", "per_s": "1/s", "_s": "s", "compilations": "count",
          "_pct": "%", "_usd": "USD", "_ratio": "×"}


def unit_of(metric: str) -> str:
    return next((unit for suffix, unit in _UNITS.items() if metric.endswith(suffix)), "")


def _samples(value) -> list[float]:
    if value is None:
        return []
    return [float(v) for v in value] if isinstance(value, list) else [float(value)]


def cache_of(result: dict) -> str:
    """``warm`` or ``cold`` (results from before warm processes existed were all cold)."""
    return result.get("cache", "cold")


def summarize(results: list[dict]) -> list[dict]:
    """One row per (backend, workload, metric, cache state); cells without data get one status row."""
    pooled: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    failed: dict[tuple[str, str], dict] = {}
    for result in results:
        if result["status"] != "ok":
            failed[(result["backend"], result["workload"])] = result
            continue
        metrics = pooled.setdefault((result["backend"], result["workload"], cache_of(result)), {})
        for metric, value in result.get("metrics", {}).items():
            metrics.setdefault(metric, []).extend(_samples(value))
    rows = []
    for (backend, workload, cache), metrics in pooled.items():
        for metric, samples in metrics.items():
            if not samples:
                continue
            rows.append(dict(zip(ROW_FIELDS, (
                backend, workload, metric, unit_of(metric), statistics.median(samples),
                min(samples), max(samples), len(samples), "ok", None, cache))))
    measured = {(backend, workload) for backend, workload, _ in pooled}
    for (backend, workload), result in failed.items():
        if (backend, workload) not in measured:
            rows.append(dict(zip(ROW_FIELDS, (
                backend, workload, None, None, None, None, None, 0, result["status"], result.get("reason"),
                cache_of(result)))))
    return rows


@dataclass(frozen=True)
class Target:
    """``numerator / denominator`` of two rows, with its limit (None: context only).
    ``denominator`` None: the numerator is a ratio each process measured itself (both devices in
    one process), one observation per process, as a pair's ratio is one per round."""

    label: str
    numerator: tuple[str, str, str]
    denominator: tuple[str, str, str] | None
    limit: float | None
    meaning: str


TARGETS = [
    Target("training step, steady state: neuron eager / CPU eager", ("neuron", "train", "steady_step_ms"),
           ("cpu", "train", "steady_step_ms"), 1.03, "emulator cost per step with fidelity accounting on"),
    Target("training step, steady state: neuron eager (accounting off) / CPU eager",
           ("neuron_noacct", "train", "steady_step_ms"), ("cpu", "train", "steady_step_ms"), None,
           "cost of the device layer alone"),
    Target("training step, steady state: neuron compiled / CPU Inductor",
           ("neuron_compiled", "train", "steady_step_ms"), ("cpu_inductor", "train", "steady_step_ms"), 1.05,
           "emulated graph compiler vs native Inductor"),
    Target("time to first step: neuron eager / PyTorch-XLA", ("neuron", "train", "first_step_ms"),
           ("xla", "train", "first_step_ms"), 0.5, "waiting before training starts"),
    Target("time to first step: neuron compiled / PyTorch-XLA", ("neuron_compiled", "train", "first_step_ms"),
           ("xla", "train", "first_step_ms"), None, "graph compile of the first step"),
    Target("compilations, padded var-len: neuron eager / PyTorch-XLA",
           ("neuron", "varlen_padded", "compilations"), ("xla", "varlen_padded", "compilations"), 1.0,
           "kernels (eager) vs whole graphs (XLA): different units, see docs"),
    Target("compilations, padded var-len: neuron compiled / PyTorch-XLA",
           ("neuron_compiled", "varlen_padded", "compilations"), ("xla", "varlen_padded", "compilations"), 1.0,
           "graphs vs graphs"),
    Target("var-len training total (unpadded): neuron eager / PyTorch-XLA", ("neuron", "varlen", "total_s"),
           ("xla", "varlen", "total_s"), None, "dynamic shapes without padding"),
    Target("per-op add: neuron eager / CPU eager", ("neuron", "ops", "add_us"), ("cpu", "ops", "add_us"), 1.15,
           "dispatch overhead"),
    Target("per-op mul: neuron eager / CPU eager", ("neuron", "ops", "mul_us"), ("cpu", "ops", "mul_us"), 1.15,
           "dispatch overhead"),
    Target("per-op fill_: neuron eager / CPU eager", ("neuron", "ops", "fill_us"), ("cpu", "ops", "fill_us"), 1.15,
           "dispatch overhead of an in-place op"),
    Target("per-op mm 64x64: neuron eager / CPU eager", ("neuron", "ops", "mm64_us"), ("cpu", "ops", "mm64_us"),
           1.15, "dispatch overhead"),
    Target("per-op view + in-place: neuron eager / CPU eager", ("neuron", "ops", "view_inplace_us"),
           ("cpu", "ops", "view_inplace_us"), 1.15, "dispatch overhead"),
    Target("per-op atan2: neuron eager / CPU eager", ("neuron", "ops", "atan2_us"), ("cpu", "ops", "atan2_us"), 1.15,
           "dispatch overhead of an op the boxed CPU fallback runs"),
    Target("peak host RSS, training: neuron eager / CPU eager", ("neuron", "train", "peak_rss_mb"),
           ("cpu", "train", "peak_rss_mb"), 1.1, "host memory the emulator adds"),
    Target("per-token latency, manual decode loop: neuron eager / CPU eager", ("neuron", "generate", "per_token_ms"),
           ("cpu", "generate", "per_token_ms"), 1.05, "decode speed of a hand-written loop"),
    Target("static-cache generate(), per token: neuron eager / CPU eager",
           ("neuron", "generate_static", "per_token_ms"), ("cpu", "generate_static", "per_token_ms"), 1.05,
           "the decode loop users run"),
    Target("static-cache generate(), time to first token: neuron eager / CPU eager",
           ("neuron", "generate_static", "ttft_ms"), ("cpu", "generate_static", "ttft_ms"), 1.1,
           "prefill through generate()"),
    Target("static-cache generate(), per token, both devices in one process: neuron / CPU",
           ("neuron", "decode_in_process", "generate_ratio"), None, 1.05,
           "the generate() row without the spread between processes"),
    Target("per-token latency, manual decode loop, both devices in one process: neuron / CPU",
           ("neuron", "decode_in_process", "loop_ratio"), None, 1.05,
           "the manual loop row without the spread between processes"),
    Target("per-token latency: neuron compiled / CPU Inductor", ("neuron_compiled", "generate", "per_token_ms"),
           ("cpu_inductor", "generate", "per_token_ms"), 1.05, "compiled decode speed"),
    Target("training step, steady state, both backends in one process: neuron compiled / CPU Inductor",
           ("neuron_compiled", "compiled_in_process", "train_ratio"), None, 1.05,
           "the compiled training step row without the spread between processes"),
    Target("per-token latency, compiled decode loop, both backends in one process: neuron compiled / CPU Inductor",
           ("neuron_compiled", "compiled_in_process", "loop_ratio"), None, 1.05,
           "the compiled decode row without the spread between processes"),
]


def in_thread_cpu_time(metric: str) -> str:
    """The name of a per-op wall-clock metric (``<op>_us``) timed in the thread's CPU time instead."""
    return metric.removesuffix("_us") + "_thread_us"


def _in_thread_cpu_time(target: Target) -> Target:
    """A per-op row again in thread CPU time: context on a shared machine, without a limit."""
    def metric(key: tuple[str, str, str]) -> tuple[str, str, str]:
        backend, workload, name = key
        return backend, workload, in_thread_cpu_time(name)

    return Target(target.label.replace(": ", ", thread CPU time: ", 1), metric(target.numerator),
                  metric(target.denominator), None, "the row above without time other processes took")


TARGETS += [_in_thread_cpu_time(target) for target in list(TARGETS) if target.numerator[1] == "ops"]


def _per_process(results: list[dict], key: tuple[str, str, str]) -> dict[tuple, float]:
    """Each successful process's own median of one metric, by the round it ran in and its cache state."""
    backend, workload, metric = key
    out = {}
    for result in results:
        if (result["backend"], result["workload"], result["status"]) == (backend, workload, "ok"):
            samples = _samples(result.get("metrics", {}).get(metric))
            if samples:
                out[(result.get("run", 0), result["repeat"], cache_of(result))] = statistics.median(samples)
    return out


def _disagreeing(results: list[dict], target: Target) -> str | None:
    """Why a one-process target gives no ratio: the processes whose two sides did not compute the
    same thing (the workload's ``info[<path>]["same_*"]`` for metric ``<path>_ratio``, e.g. other
    tokens), whose times then compare different work. None when every process agreed."""
    backend, workload, metric = target.numerator
    checks = [result.get("info", {}).get(metric.removesuffix("_ratio"), {}) for result in results
              if (result["backend"], result["workload"], result["status"]) == (backend, workload, "ok")]
    differing = [names for names in ([name.removeprefix("same_") for name, same in check.items()
                                       if name.startswith("same_") and not same] for check in checks) if names]
    if not differing:
        return None
    what = " and ".join(sorted({name for names in differing for name in names}))
    return (f"refused: the two sides' {what} differed in {len(differing)} of {len(checks)} processes, "
            "so their times compare different work")


def paired_ratios(results: list[dict], target: Target) -> list[tuple[str, float]]:
    """Numerator over denominator process by process, for every round whose two processes have
    the same cache state (a warm compiled first step over a cold one would say nothing): that
    state and the ratio, for every such round with both sides positive. A target without a
    denominator: each process's own ratio."""
    num = _per_process(results, target.numerator)
    if target.denominator is None:
        return [(key[2], num[key]) for key in sorted(num) if num[key] > 0]
    den = _per_process(results, target.denominator)
    return [(key[2], num[key] / den[key]) for key in sorted(num.keys() & den.keys())
            if num[key] > 0 and den[key] > 0]


def ratios(rows: list[dict], results: list[dict]) -> list[dict]:
    """Each target from paired processes: geometric mean of the pairs' ratios (``ratio``), its
    95 % interval (``low``–``high``), how many pairs were warm (``warm_pairs``), the verdict
    against the limit (``verdict``). Sides measured in different runs (``--combine``) have no
    pairs: their ratio is of the pooled medians of cold processes, with no interval."""
    by_key = {(r["backend"], r["workload"], r["metric"]): r for r in rows
              if r["status"] == "ok" and r["cache"] == "cold"}
    out = []
    for target in TARGETS:
        sides = [(key, by_key.get(key)) for key in (target.numerator, target.denominator) if key]
        num, den = sides[0][1], (sides[1][1] if len(sides) == 2 else None)
        entry = {"label": target.label, "limit": target.limit, "meaning": target.meaning, "ratio": None,
                 "low": None, "high": None, "pairs": 0, "warm_pairs": 0, "pair_ratios": [], "verdict": None,
                 "pairs_to_decide": None, "observed": "process" if target.denominator is None else "pair"}
        missing = [f"{b}/{w}" for (b, w, _), row in sides if row is None]
        refused = None if missing or den is not None else _disagreeing(results, target)
        if missing or refused or (den is not None and not den["median"]):
            entry["missing"] = ", ".join(missing) or refused or "zero denominator"
            out.append(entry)
            continue
        pairs = paired_ratios(results, target)
        if pairs:
            pair_ratios = [ratio for _, ratio in pairs]
            paired = stats.paired_ratio(pair_ratios)
            entry.update(ratio=paired.geometric_mean, low=paired.low, high=paired.high, pairs=paired.pairs,
                         warm_pairs=sum(cache == "warm" for cache, _ in pairs), pair_ratios=pair_ratios,
                         verdict=paired.verdict(target.limit))
            if entry["verdict"] == "undecided":
                entry["pairs_to_decide"] = paired.pairs_to_decide(target.limit)
        else:
            # Without a denominator the numerator is a ratio already (one process's own).
            pooled = num["median"] / den["median"] if den is not None else num["median"]
            entry.update(ratio=pooled, verdict=None if target.limit is None else "undecided")
        out.append(entry)
    return out


def machine() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(memory_gib, 1),
            "os": platform.platform(), "python": platform.python_version()}


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _cell(row: dict | None) -> str:
    if row is None:
        return "–"
    if row["status"] != "ok":
        return row["status"]
    if row["n"] == 1 or row["min"] == row["max"]:
        return _fmt(row["median"])
    return f"{_fmt(row['median'])} ({_fmt(row['min'])}–{_fmt(row['max'])})"


def markdown(rows: list[dict], targets: list[dict], meta: dict, results: list[dict]) -> str:
    """The results page: context, targets, then one table per workload."""
    lines = [f"# Benchmark results ({meta['size']} size)", ""]
    m = meta["machine"]
    threads = meta.get("threads") or "PyTorch default"
    lines += [f"- date: {meta['date']}; pairs (rounds): {meta['pairs']}, backends that compile graphs: "
              f"{meta['compiled_pairs']}; intra-op threads: {threads}; wall time {meta['wall_s']:.0f} s",
              f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}; Python {m['python']}",
              f"- load average at start / end: {meta['load_start']} / {meta['load_end']}",
              f"- versions: {meta['versions']}",
              "- every time on this page is a host measurement on this machine; `compilations` and "
              "`est_device_compile_s` are emulated counts and estimates, `projected_*` rows projections",
              "- targets: each round runs the two sides of a comparison back to back, alternating which goes "
              "first; a pair's ratio divides the two processes' own medians; ratio: geometric mean of the "
              "pairs' ratios; 95 % CI: Student t on their logarithms; verdict: met when the whole interval "
              "is at or under the limit, not met when all of it is above, undecided otherwise; a row \"both "
              "devices in one process\" counts processes, not pairs: each process's own ratio (its rounds "
              "alternate the devices) is one observation",
              f"- caches: {_caches(results)}",
              "- cells: median (min–max) over all samples of all repeated processes of one cache state", ""]
    lines += ["## Targets", "", "| comparison | ratio | 95 % CI | pairs | limit | verdict |",
              "|---|---|---|---|---|---|"]
    for t in targets:
        if t["ratio"] is None:
            lines.append(f"| {t['label']} | n/a ({t['missing']}) | | | {_limit(t)} | |")
            continue
        interval = "" if t["low"] is None else f"{t['low']:.2f}–{t['high']:.2f}"
        pairs = (f"{t['pairs']} ({t['warm_pairs']} warm)" if t["warm_pairs"] else t["pairs"]) or "unpaired"
        lines.append(f"| {t['label']} | {t['ratio']:.2f}× | {interval} | {pairs} | {_limit(t)} | {_verdict(t)} |")
    present = {r["backend"] for r in rows}
    backends = [b for b in BY_NAME if b in present]
    by_cell = {(r["backend"], r["workload"], r["metric"], r["cache"]): r for r in rows}
    status = {(r["backend"], r["workload"]): r for r in rows if r["status"] != "ok"}
    workloads = {r["workload"] for r in rows}
    for workload in [*EAGER_WORKLOADS, *sorted(workloads - set(EAGER_WORKLOADS))]:
        if workload not in workloads:
            continue
        metrics = sorted(dict.fromkeys((r["cache"], r["metric"]) for r in rows if r["workload"] == workload
                                       and r["metric"]), key=lambda cached: cached[0] == "warm")
        lines += ["", f"## {workload}", "",
                  "| metric | " + " | ".join(BY_NAME[b].label if b in BY_NAME else b for b in backends) + " |",
                  "|---" * (len(backends) + 1) + "|"]
        for cache, metric in metrics:
            cells = [_cell(by_cell.get((b, workload, metric, cache)) or status.get((b, workload))) for b in backends]
            label = f"{metric}, warm cache" if cache == "warm" else metric
            lines.append(f"| {label} [{unit_of(metric)}] | " + " | ".join(cells) + " |")
        if not metrics:
            lines.append("| (no data) | " + " | ".join(_cell(status.get((b, workload))) for b in backends) + " |")
    for result in results:
        if result["workload"] == "collectives" and result["status"] == "ok":
            lines += _collectives(result["collectives"])
    problems = [r for r in rows if r["status"] != "ok"]
    if problems:
        lines += ["", "## Not measured", ""]
        lines += [f"- {r['backend']} / {r['workload']}: {r['status']} — {r['reason']}" for r in problems]
    return "\n".join(lines) + "\n"


def _collectives(data: dict) -> list[str]:
    """Bus bandwidth of the ``neuron`` process group next to plain gloo (higher ratio is better)."""
    lines = ["", f"## collectives ({data['world']} ranks, median of {data['iters']} iterations)", "",
             "| op | MiB | neuron GB/s | gloo GB/s | neuron / gloo |", "|---|---|---|---|---|"]
    lines += [f"| {r['op']} | {r['size_mib']} | {r['neuron_busbw_gbs']:.3f} | {r['gloo_busbw_gbs']:.3f} "
              f"| {r['ratio']:.2f} |" for r in data["rows"]]
    met = "yes" if data["meets_target"] else "**no**"
    lines += ["", f"Lowest ratio {data['min_ratio']:.2f}, geometric mean {data['geomean_ratio']:.2f}; "
                  f"target ≥ {data['target_ratio']:g}: {met}."]
    return lines


def _caches(results: list[dict]) -> str:
    """Which processes started from empty caches and which reused a cold process's."""
    warm = sorted({r["backend"] for r in results if cache_of(r) == "warm"})
    if not warm:
        return "every process started from empty caches (cold)"
    return (f"every process started from empty caches (cold) except the warm ones of {', '.join(warm)}: "
            "after a cold process of a workload in round 1, that backend's later rounds of the workload "
            "reuse its cache directories (they trace again; the compiled code comes from the cache); rows "
            "marked \"warm cache\" pool warm processes, the others cold ones; a pair joins two processes "
            "of one cache state")


# What one observation of a target is: a one-process row's is a process, a paired row's a pair.
_PLURAL = {"pair": "pairs", "process": "processes"}


def _verdict(target: dict) -> str:
    verdict = target["verdict"]
    if verdict == "not met":
        return "**not met**"
    if verdict == "undecided" and target["pairs_to_decide"]:
        more = target["pairs_to_decide"] - target["pairs"]
        unit = target["observed"]
        return f"undecided (≈ {more} more {unit if more == 1 else _PLURAL[unit]})"
    return verdict or ""


def _limit(target: dict) -> str:
    return "" if target["limit"] is None else f"≤ {target['limit']:g}×"
