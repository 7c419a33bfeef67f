"""Worker-side view of each backend: where tensors live, how to compile, sync and count compiles.

The workloads are written once against this small interface so every backend
runs exactly the same Python. Imported only inside a worker process (it needs
``torch``); the runner never imports it.
"""
from __future__ import annotations

import os

import torch


class Unavailable(RuntimeError):
    """The backend cannot run in this environment; the report says why instead of failing."""


class Adapter:
    """Native CPU eager: the physical limit for an emulator whose kernels run on the host."""

    device = torch.device("cpu")

    def place(self, model):
        return model.to(self.device)

    def compile(self, model):
        return model

    def sync(self) -> None:
        """Wait until queued work is done (a no-op for synchronous backends)."""

    def compilations(self) -> int | None:
        """Compilations so far in this process, or None when the backend has no such notion."""
        return None

    def estimated_compile_s(self) -> float | None:
        """Compile time the real device would add on top of the wall clock (emulators only)."""
        return None

    def projection_mark(self):
        """A point to project the device work from (``projected``), or None: no device model."""
        return None

    def projected(self, mark, steps: int = 1) -> dict | None:
        """The projection of the work since ``mark`` (``steps`` equal steps): its window, one
        step's projected seconds and dollars (``cost``, a ``CostProjection`` of one step), and
        the host seconds the projection itself has spent (docs/projection.md)."""
        return None

    def info(self) -> dict:
        return {"torch": torch.__version__, "threads": torch.get_num_threads()}


class _Projecting:
    """The ``neuron`` device's projection (``torch_neuronx.accounting.projected``)."""

    @staticmethod
    def _spent() -> float:
        """Host seconds the projection has spent inside the run: queueing new signatures,
        projecting compiled graphs (at compile time)."""
        from torch_neuronx.accounting import projected

        return projected.QUEUEING.data()[1] + projected.PROJECTING.data()[1]

    def projection_mark(self):
        from torch_neuronx.accounting import projected

        return projected.mark(), self._spent()

    def projected(self, mark, steps: int = 1) -> dict | None:
        from torch_neuronx.accounting import projected
        from torch_neuronx.projection import get_projector

        counts, spent_before = mark
        in_run = self._spent() - spent_before
        window = projected.since(counts)  # projects the queued signatures: outside the timed steps
        if not window.step.seconds:  # kernel accounting off: no device work was recorded to project
            return None
        return {"seconds": window.step.seconds, "mfu": window.step.mfu, "window": window,
                "cost": get_projector().cost(window.step.seconds / steps), "in_run_seconds": in_run,
                "deferred_seconds": self._spent() - spent_before - in_run}

class DynamoCounting(Adapter):
    """Counts graphs Dynamo compiled (shared by Inductor and the neuron compile backend)."""

    backend = "inductor"

    def compile(self, model):
        return torch.compile(model, backend=self.backend)

    def compilations(self) -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def info(self) -> dict:
        """Plus the hits and misses of Inductor's graph cache and AOTAutograd's: what makes a
        process warm (the runner's ``cache``) rather than what it was told it was."""
        from torch._dynamo.utils import counters

        out = super().info()
        out["compile_caches"] = {
            "fx_graph": {"hits": counters["inductor"]["fxgraph_cache_hit"],
                         "misses": counters["inductor"]["fxgraph_cache_miss"]},
            "aot_autograd": {"hits": counters["aot_autograd"]["autograd_cache_hit"],
                             "misses": counters["aot_autograd"]["autograd_cache_miss"]}}
        return out


class CpuInductor(DynamoCounting):
    """Native CPU ``torch.compile`` with Inductor: the compiled-path limit."""


def _import_neuron():
    try:
        import torch_neuronx  # noqa: F401  (registers the device when autoload is off)
    except ImportError as exc:
        raise Unavailable(f"torch_neuronx is not importable: {exc}") from exc
    return torch_neuronx


class NeuronEager(_Projecting, Adapter):
    """``neuron`` eager; kernel accounting (per-signature compile emulation) on or off."""

    def __init__(self, accounting: bool):
        self.torch_neuronx = _import_neuron()
        self.device = torch.device("neuron")
        self.accounting = accounting
        self.accounting_switched_by = self._ensure_accounting(accounting)

    def _ensure_accounting(self, wanted: bool) -> str:
        """Apply the wanted accounting state; say whether the env switch already did.

        The runner sets ``TORCHNEURON_KERNEL_ACCOUNTING``; checking it took
        effect keeps the benchmark from silently measuring the wrong mode.
        """
        if self.torch_neuronx.kernel_accounting_enabled() == wanted:
            return "TORCHNEURON_KERNEL_ACCOUNTING"
        self.torch_neuronx.set_kernel_accounting(wanted)
        return "torch_neuronx.set_kernel_accounting (the env switch was not honoured)"

    def sync(self) -> None:
        torch.neuron.synchronize()

    def compilations(self) -> int | None:
        """Kernel signatures missing from the (fresh, per-process) NEFF cache."""
        if not self.accounting:
            return None
        return int(self.torch_neuronx.metrics()["kernels"]["misses"])

    def estimated_compile_s(self) -> float | None:
        """What those compilations would cost on Trainium (the accounting layer's estimate)."""
        if not self.accounting:
            return None
        return float(self.torch_neuronx.metrics()["estimated_compile_seconds"])

    def info(self) -> dict:
        out = super().info()
        out["torch_neuronx"] = self.torch_neuronx.__version__
        out["accounting"] = self.accounting
        out["accounting_switched_by"] = self.accounting_switched_by
        if self.accounting:
            kernels = dict(self.torch_neuronx.metrics()["kernels"])
            kernels.pop("per_op")
            out["kernels"] = kernels
        return out


class NeuronCompiled(_Projecting, DynamoCounting):
    """``torch.compile(model, backend="neuron")`` on the ``neuron`` device."""

    backend = "neuron"

    def __init__(self):
        self.torch_neuronx = _import_neuron()
        self.device = torch.device("neuron")
        from torch._dynamo.backends.registry import lookup_backend

        try:
            lookup_backend(self.backend)
        except Exception as exc:  # InvalidBackend, or an import error inside the backend
            raise Unavailable(f'torch.compile backend "neuron" is not available: {exc}') from exc

    def sync(self) -> None:
        torch.neuron.synchronize()

    def compilations(self) -> int:
        return int(self.torch_neuronx.get_dynamo_metrics()["graphs_compiled"])

    def info(self) -> dict:
        out = super().info()
        out["torch_neuronx"] = self.torch_neuronx.__version__
        metrics = self.torch_neuronx.get_dynamo_metrics()
        keep = ("graphs_compiled", "aot_graphs_compiled", "recompilations", "graph_breaks",
                "compile_seconds", "cache_hits", "cache_misses", "fallbacks")
        out["dynamo_metrics"] = {key: metrics[key] for key in keep}
        return out


class Xla(Adapter):
    """The old path: PyTorch/XLA lazy tensors on its CPU PJRT device (own venv, older torch)."""

    def __init__(self):
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        try:
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.debug.metrics as met
        except ImportError as exc:
            raise Unavailable(f"torch_xla is not importable: {exc}") from exc
        self.torch_xla, self.xm, self.met = torch_xla, xm, met
        self.device = torch_xla.device()

    def sync(self) -> None:
        """Cut the lazy graph here, run it, and wait: the point where XLA compiles."""
        self.torch_xla.sync()
        self.xm.wait_device_ops()

    def compilations(self) -> int:
        data = self.met.metric_data("CompileTime")
        return int(data[0]) if data else 0

    def info(self) -> dict:
        out = super().info()
        out["torch_xla"] = self.torch_xla.__version__
        out["pjrt_device"] = os.environ.get("PJRT_DEVICE")
        return out


def make_adapter(backend: str) -> Adapter:
    """Build the adapter for a backend name from ``benchmarks.backends.BACKENDS``."""
    factories = {
        "cpu": Adapter,
        "cpu_inductor": CpuInductor,
        "neuron": lambda: NeuronEager(accounting=True),
        "neuron_noacct": lambda: NeuronEager(accounting=False),
        "neuron_compiled": NeuronCompiled,
        "xla": Xla,
    }
    if backend not in factories:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(factories)}")
    return factories[backend]()
