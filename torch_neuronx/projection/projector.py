"""The projector: per-signature kernel costs combined with call counts into
projected device seconds, plus compiled graphs, collectives, compilation and cost.

Every figure it returns is a projection (``"label": "projected"``) of one
logical NeuronCore of the chosen instance, under the calibration in force.
"""
from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping

from .calibration import Calibration, active_calibration
from .collectives import CollectiveRecord, collective_seconds
from .graph import GraphCost, project_graph
from .hardware import ENGINES, device_model, price
from .kernel import KernelCost, ProjectionError, project_call

LABEL = "projected"


class Projector:
    """Projects the kernels, graphs and collectives of one process (one logical core)."""

    def __init__(self, instance: str | None = None, lnc: int | None = None,
                 calibration: Calibration | None = None) -> None:
        self.device = device_model(instance, lnc)
        self.calibration = calibration or active_calibration()
        self.kernels: dict[str, KernelCost] = {}
        self.graphs: dict[str, GraphCost] = {}
        self._lock = threading.Lock()

    # --- eager kernels ------------------------------------------------------------
    def add_signature(self, op: str, key: str, args: tuple) -> KernelCost:
        """Project a kernel signature new to this process (the eager path calls this
        once per signature, with meta tensors); a known key keeps its first projection."""
        with self._lock:
            known = self.kernels.get(key)
        if known is not None:
            return known
        cost = project_call(op, tuple(args), self.device, self.calibration)
        with self._lock:
            return self.kernels.setdefault(key, cost)

    def launch_seconds(self, cost: KernelCost) -> float:
        """Per-call launch overhead of an eager kernel (none for views and allocations)."""
        if cost.engine == "none":
            return 0.0
        return self.calibration.op_override(cost.op).get("launch_seconds",
                                                         self.calibration.launch_seconds["eager"])

    def summary(self, calls: Mapping[str, int]) -> dict:
        """Device seconds of ``calls`` (signature key → number of calls): by op, by
        engine, compute- vs memory-bound, launch overhead and MFU."""
        with self._lock:
            missing = [k for k in calls if k not in self.kernels]
            kernels = dict(self.kernels)
        if missing:
            raise ProjectionError(f"{len(missing)} call count(s) name signatures never added with "
                                  f"add_signature, e.g. {missing[0]!r}")
        by_op: dict[str, dict] = {}
        by_engine = dict.fromkeys(ENGINES, 0.0)
        bound = {"compute": 0.0, "memory": 0.0}
        launch_total = flops_total = 0.0
        unknown = set()
        for key, n in calls.items():
            if n < 0:
                raise ProjectionError(f"call count of {key!r} is negative ({n})")
            cost = kernels[key]
            seconds, launch = cost.seconds * n, self.launch_seconds(cost) * n
            row = by_op.setdefault(cost.op, {"engine": cost.engine, "calls": 0, "signatures": 0,
                                             "kernel_seconds": 0.0, "launch_seconds": 0.0,
                                             "flops": 0, "bytes": 0, "compute_bound_seconds": 0.0,
                                             "memory_bound_seconds": 0.0})
            row["calls"] += n
            row["signatures"] += 1
            row["kernel_seconds"] += seconds
            row["launch_seconds"] += launch
            row["flops"] += cost.flops * n
            row["bytes"] += cost.bytes * n
            if cost.engine != "none":
                by_engine[cost.engine] += seconds
                bound[cost.bound] += seconds
                row[f"{cost.bound}_bound_seconds"] += seconds
            launch_total += launch
            flops_total += cost.flops * n
            if not cost.outputs_known:
                unknown.add(cost.op)
        kernel_total = sum(by_engine.values())
        device_seconds = kernel_total + launch_total
        return {
            "label": LABEL,
            "device_seconds": device_seconds,
            "kernel_seconds": kernel_total,
            "launch_overhead_seconds": launch_total,
            "compute_bound_seconds": bound["compute"],
            "memory_bound_seconds": bound["memory"],
            "flops": int(flops_total),
            "mfu": self.mfu(flops_total, device_seconds),
            "by_engine": by_engine,
            "by_op": dict(sorted(by_op.items(),
                                 key=lambda kv: -kv[1]["kernel_seconds"] - kv[1]["launch_seconds"])),
            "ops_with_unknown_outputs": sorted(unknown),
        }

    def mfu(self, flops: float, seconds: float) -> float | None:
        """Model FLOPs utilisation against the logical core's BF16 TensorE peak."""
        return flops / (seconds * self.device.tensor_flops["bf16"]) if seconds > 0 else None

    # --- compiled graphs --------------------------------------------------------------
    def add_graph(self, name: str, gm, example_inputs) -> GraphCost:
        """Project an FX graph (``torch.compile``'s, Dynamo- or ATen-level) as one program."""
        cost = project_graph(name, gm, example_inputs, self.device, self.calibration)
        with self._lock:
            self.graphs[name] = cost
        return cost

    def graphs_summary(self, runs: Mapping[str, int]) -> dict:
        """Device seconds of ``runs`` (graph name → executions), one launch per execution."""
        unknown = [n for n in runs if n not in self.graphs]
        if unknown:
            raise ProjectionError(f"graph(s) {unknown} were never added with add_graph")
        launch = self.calibration.launch_seconds["graph"]
        rows = {}
        for name, n in runs.items():
            g = self.graphs[name]
            rows[name] = {"executions": n, "seconds": g.seconds * n, "launch_seconds": launch * n,
                          "flops": g.flops * n, "bytes": g.bytes * n, "bound": g.bound, "nodes": g.nodes,
                          "engine_seconds": {e: s * n for e, s in g.engine_seconds.items()}}
        seconds = sum(r["seconds"] + r["launch_seconds"] for r in rows.values())
        flops = sum(r["flops"] for r in rows.values())
        return {"label": LABEL, "device_seconds": seconds,
                "launch_overhead_seconds": sum(r["launch_seconds"] for r in rows.values()),
                "flops": flops, "mfu": self.mfu(flops, seconds), "graphs": rows}

    # --- collectives, compilation, cost ----------------------------------------------------
    def collectives_summary(self, records: Iterable[CollectiveRecord] | Mapping[CollectiveRecord, int]) -> dict:
        """Seconds of a list of collectives, or of a record → count mapping (``COLLECTIVE_LOG.counts``).

        A collective over a link with no known bandwidth is not projected: it is
        listed under ``unprojected`` with the reason, and its seconds are left out.
        """
        counted = records.items() if isinstance(records, Mapping) else ((r, 1) for r in records)
        by_kind: dict[str, dict] = defaultdict(lambda: {"calls": 0, "bytes": 0, "seconds": 0.0})
        by_link = defaultdict(float)
        unprojected: dict[str, dict] = {}
        for rec, n in counted:
            try:
                s = collective_seconds(rec, self.device, self.calibration) * n
            except ProjectionError as e:
                entry = unprojected.setdefault(rec.link, {"calls": 0, "bytes": 0, "reason": str(e)})
                entry["calls"] += n
                entry["bytes"] += rec.nbytes * n
                continue
            row = by_kind[rec.kind]
            row["calls"] += n
            row["bytes"] += rec.nbytes * n
            row["seconds"] += s
            by_link[rec.link] += s
        return {"label": LABEL, "seconds": sum(by_link.values()), "by_kind": dict(by_kind),
                "by_link": dict(by_link), "unprojected": unprojected}

    def compile_summary(self, kernel_compiles: int, seconds_per_kernel: float, graph_compiles: int = 0) -> dict:
        """First-run compile time (an empty NEFF cache), kept apart from steady state."""
        if kernel_compiles < 0 or graph_compiles < 0 or seconds_per_kernel < 0:
            raise ProjectionError("compile counts and seconds must be >= 0")
        eager = kernel_compiles * seconds_per_kernel
        graphs = graph_compiles * self.calibration.compile_seconds_per_graph
        return {"label": LABEL, "first_run_compile_seconds": eager + graphs,
                "eager_kernel_compiles": kernel_compiles, "eager_compile_seconds": eager,
                "graph_compiles": graph_compiles, "graph_compile_seconds": graphs,
                "seconds_per_kernel": seconds_per_kernel,
                "seconds_per_graph": self.calibration.compile_seconds_per_graph}

    def cost(self, seconds_per_step: float, steps: int = 1, price_per_hour: float | None = None,
             compile_seconds: float = 0.0) -> dict:
        """What ``steps`` steps of ``seconds_per_step`` cost on the instance (whole-instance
        price, so idle cores are paid for too), plus the first-run compile hours."""
        if seconds_per_step < 0 or steps < 0 or compile_seconds < 0:
            raise ProjectionError("seconds, steps and compile seconds must be >= 0")
        if price_per_hour is not None and not (math.isfinite(price_per_hour) and price_per_hour >= 0):
            raise ProjectionError(f"price_per_hour={price_per_hour} must be a finite number >= 0")
        p = price(self.device.instance, price_per_hour)
        rate = p["usd_per_hour"]
        run = seconds_per_step * steps
        usd = (lambda s: s * rate / 3600) if rate is not None else (lambda s: None)
        return {"label": LABEL, "steps": steps, "seconds_per_step": seconds_per_step, "run_seconds": run,
                "run_usd": usd(run), "compile_seconds": compile_seconds, "compile_usd": usd(compile_seconds),
                "total_usd": usd(run + compile_seconds), "price": p}

    def describe(self) -> dict:
        d = self.device
        return {"label": LABEL, "instance": d.instance, "target": d.target, "legacy_target": d.legacy,
                "lnc": d.lnc, "basis": "one logical NeuronCore", "calibration": self.calibration.source,
                "tensor_flops": d.tensor_flops, "hbm_bytes_per_s": d.hbm_bytes_per_s}

    def reset(self) -> None:
        with self._lock:
            self.kernels.clear()
            self.graphs.clear()

    def snapshot(self, calls: Mapping[str, int] | None = None, graph_runs: Mapping[str, int] | None = None,
                 collectives: Iterable[CollectiveRecord] | Mapping[CollectiveRecord, int] = (),
                 compiles: Mapping | None = None,
                 steps: int | None = None, price_per_hour: float | None = None) -> dict:
        """One JSON-serialisable projection of a run, for ``metrics()``, the pilot and
        the benchmarks. ``compiles`` holds ``compile_summary``'s arguments; with
        ``steps``, the whole of ``calls``/``graph_runs``/``collectives`` is one step."""
        eager = self.summary(calls or {})
        graphs = self.graphs_summary(graph_runs or {})
        comm = self.collectives_summary(collectives)
        compute = eager["device_seconds"] + graphs["device_seconds"]
        data = {"label": LABEL, "device": self.describe(), "eager": eager, "graphs": graphs,
                "collectives": comm,
                "step_seconds_no_overlap": compute + comm["seconds"],
                "step_seconds_full_overlap": max(compute, comm["seconds"]),
                "mfu": self.mfu(eager["flops"] + graphs["flops"], compute + comm["seconds"])}
        if compiles is not None:
            data["compile"] = self.compile_summary(**compiles)
        if steps is not None:
            data["cost"] = self.cost(data["step_seconds_no_overlap"], steps, price_per_hour,
                                     data.get("compile", {}).get("first_run_compile_seconds", 0.0))
        return data
