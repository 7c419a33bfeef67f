"""The projector: per-signature kernel costs combined with call counts into
projected device seconds, plus compiled graphs, collectives, compilation and cost.

``step``, ``compile`` and ``cost`` return the typed results of ``results.py``; the
``summary``-style methods return the breakdowns behind them (by op, engine, graph, link).

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
from .compile_time import GraphProgram, project_compile
from .graph import GraphCost, project_graph
from .hardware import ENGINES, device_model, price
from .kernel import KernelCost, ProjectionError, project_call
from .results import LABEL, CompileProjection, CostProjection, Price, StepProjection, WindowProjection


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

    # --- one step, compilation, cost: the typed results every report displays ------------
    def step(self, calls: Mapping[str, int] | None = None, graph_runs: Mapping[str, int] | None = None,
             collectives: Iterable[CollectiveRecord] | Mapping[CollectiveRecord, int] = ()) -> StepProjection:
        """Device seconds of one step made of ``calls`` (signature key → calls), ``graph_runs``
        (graph name → executions) and ``collectives``."""
        return self._step(self.summary(calls or {}), self.graphs_summary(graph_runs or {}),
                          self.collectives_summary(collectives))

    def window(self, calls: Mapping[str, int], graph_runs: Mapping[str, int] | None = None) -> WindowProjection:
        """A window of work (no collectives): its step figures, the distinct signatures it ran
        and its eager breakdown by op and engine."""
        eager = self.summary(calls)
        step = self._step(eager, self.graphs_summary(graph_runs or {}), self.collectives_summary(()))
        return WindowProjection(step=step, eager_kernels=sum(1 for n in calls.values() if n > 0),
                                eager_by_op=eager["by_op"], eager_by_engine=eager["by_engine"])

    def _step(self, eager: dict, graphs: dict, comm: dict) -> StepProjection:
        compute = eager["device_seconds"] + graphs["device_seconds"]
        seconds = compute + comm["seconds"]
        flops = eager["flops"] + graphs["flops"]
        return StepProjection(seconds=seconds, seconds_full_overlap=max(compute, comm["seconds"]),
                              compute_seconds=compute, eager_seconds=eager["device_seconds"],
                              graph_seconds=graphs["device_seconds"], collective_seconds=comm["seconds"],
                              launch_overhead_seconds=eager["launch_overhead_seconds"]
                              + graphs["launch_overhead_seconds"],
                              flops=int(flops), mfu=self.mfu(flops, seconds))

    def compile(self, eager_kernels: int = 0, graphs: Iterable[GraphProgram] = ()) -> CompileProjection:
        """First-run (empty NEFF cache) compile time of ``eager_kernels`` distinct kernel
        signatures and of ``graphs`` (the compile model of ``compile_time.py``)."""
        return project_compile(eager_kernels, graphs)

    def price(self, price_per_hour: float | None = None) -> Price:
        """The instance's hourly price (a user's ``price_per_hour`` wins)."""
        return price(self.device.instance, price_per_hour)

    def cost(self, step_seconds: float, steps: int = 1, price_per_hour: float | None = None,
             compile_seconds: float = 0.0, instances: int = 1) -> CostProjection:
        """What ``steps`` steps of ``step_seconds`` cost on ``instances`` whole instances
        (idle cores are paid for too), plus the first-run compile hours."""
        if step_seconds < 0 or steps < 0 or compile_seconds < 0 or instances < 1:
            raise ProjectionError("seconds, steps and compile seconds must be >= 0, instances >= 1")
        if price_per_hour is not None and not (math.isfinite(price_per_hour) and price_per_hour >= 0):
            raise ProjectionError(f"price_per_hour={price_per_hour} must be a finite number >= 0")
        p = self.price(price_per_hour)
        run = step_seconds * steps
        usd = (lambda s: None) if p.usd_per_hour is None else (lambda s: p.usd(s) * instances)
        return CostProjection(steps=steps, instances=instances, step_seconds=step_seconds, run_seconds=run,
                              compile_seconds=compile_seconds, run_usd=usd(run), compile_usd=usd(compile_seconds),
                              total_usd=usd(run + compile_seconds), price=p)

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
                 eager_kernels: int | None = None, graphs: Iterable[GraphProgram] = (),
                 steps: int | None = None, price_per_hour: float | None = None) -> dict:
        """One JSON-serialisable projection of a run, for ``metrics()``, the pilot and the
        benchmarks: the breakdowns (eager by op and engine, graphs, collectives) and the
        typed ``step``, ``compile`` (with ``eager_kernels``) and ``cost`` (with ``steps``:
        the whole of ``calls``/``graph_runs``/``collectives`` is one step)."""
        eager = self.summary(calls or {})
        graph_rows = self.graphs_summary(graph_runs or {})
        comm = self.collectives_summary(collectives)
        step = self._step(eager, graph_rows, comm)
        data = {"label": LABEL, "device": self.describe(), "eager": eager, "graphs": graph_rows,
                "collectives": comm, "step": step.to_dict()}
        compile_ = self.compile(eager_kernels, graphs) if eager_kernels is not None else None
        if compile_ is not None:
            data["compile"] = compile_.to_dict()
        if steps is not None:
            data["cost"] = self.cost(step.seconds, steps, price_per_hour,
                                     compile_.seconds if compile_ is not None else 0.0).to_dict()
        return data
