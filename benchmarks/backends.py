"""Runner-side description of each backend: interpreter, environment, workloads.

No ``torch`` import here, so the runner stays a thin process launcher.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from . import xla_env

EAGER_WORKLOADS = ("train", "varlen", "varlen_padded", "generate", "generate_static", "ops")
# The static-cache generate() row compares the emulator with CPU; XLA keeps the manual loop.
XLA_WORKLOADS = tuple(w for w in EAGER_WORKLOADS if w != "generate_static")
# Both devices in one process (bench_compile's measurements): the eager decode rows on the
# ``neuron`` backend, the compiled rows (training step, decode) on ``neuron_compiled``, without the
# process-to-process spread that pairs of processes carry.
EAGER_IN_PROCESS = ("decode_in_process",)
COMPILED_IN_PROCESS = ("compiled_in_process",)
IN_PROCESS_WORKLOADS = EAGER_IN_PROCESS + COMPILED_IN_PROCESS
# Per-op dispatch overhead has no meaning once ops are fused into a graph.
COMPILED_WORKLOADS = ("train", "varlen", "varlen_padded", "generate")


@dataclass(frozen=True)
class Backend:
    name: str
    label: str
    workloads: tuple[str, ...]
    env: dict = field(default_factory=dict)
    xla: bool = False
    # Compiles whole graphs (tens of seconds cold): its own pair count (``--compiled-pairs``).
    graph_compile: bool = False
    # Its compiled graphs persist in Inductor's cache directories: after one cold process per
    # workload, the later rounds reuse that process's caches (warm), so a steady-state pair costs
    # seconds of tracing instead of a minute of code generation. Without it every process is cold.
    warm_cache: bool = False

    def python(self) -> str:
        return str(xla_env.python()) if self.xla else sys.executable

    def unavailable_reason(self) -> str | None:
        return xla_env.unavailable_reason() if self.xla else None


# Native CPU runs with the neuron backend's autoload off: that is plain PyTorch.
_NATIVE = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}

BACKENDS = [
    Backend("cpu", "CPU eager", EAGER_WORKLOADS, _NATIVE),
    Backend("cpu_inductor", "CPU Inductor", COMPILED_WORKLOADS, _NATIVE, graph_compile=True, warm_cache=True),
    Backend("neuron", "neuron eager", EAGER_WORKLOADS + EAGER_IN_PROCESS, {"TORCHNEURON_KERNEL_ACCOUNTING": "1"}),
    Backend("neuron_noacct", "neuron eager, accounting off", EAGER_WORKLOADS,
            {"TORCHNEURON_KERNEL_ACCOUNTING": "0"}),
    Backend("neuron_compiled", "neuron compiled", COMPILED_WORKLOADS + COMPILED_IN_PROCESS, graph_compile=True,
            warm_cache=True),
    Backend("xla", "PyTorch/XLA (CPU)", XLA_WORKLOADS, {"PJRT_DEVICE": "CPU"}, xla=True, graph_compile=True),
]
BY_NAME = {backend.name: backend for backend in BACKENDS}

# The order of one workload's processes in a round (reversed every other round): each limit's
# two backends are neighbours, so a subject runs right after or right before its reference.
ROUND_ORDER = ("neuron_noacct", "cpu", "neuron", "xla", "cpu_inductor", "neuron_compiled")
