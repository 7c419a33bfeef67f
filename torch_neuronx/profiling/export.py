"""``NeuronProfiler``: where the real product puts a profile's framework trace.

"Capture PyTorch profiles with Neuron Explorer" (DOCS) passes
``NeuronProfiler(neuron_config).export_trace`` as ``on_trace_ready``: the
PyTorch trace goes to ``<profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/trace.json``,
beside the runtime's files. Here the instance id is the host name (the
emulator runs on no EC2 instance) and the trace is the whole profile: CPU ops,
and the projected device timeline with its engine tracks.

The folder is checked when the profiler is made, before the run: one
``UsageError`` naming it. Failing to write later (a full disk, the folder
removed) costs the trace, never the run: one warning, and ``None``.
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from pathlib import Path

from ..runtime import settings
from ..runtime.errors import UsageError, first_line
from .config import NeuronConfig, check_output_dir

TRACE_FILE = "trace.json"


def default_output_dir() -> str:
    return settings.get_str("NEURON_RT_INSPECT_OUTPUT_DIR")


class NeuronProfiler:
    """Exports a ``torch.profiler.profile``'s trace where Neuron Explorer looks for it."""

    def __init__(self, config: NeuronConfig | None = None) -> None:
        if config is not None and not isinstance(config, NeuronConfig):
            raise UsageError(f"NeuronProfiler takes a NeuronConfig, not {type(config).__name__}")
        self.config = config
        given = None if config is None else config.profile_output_dir
        self.output_dir = check_output_dir(given if given is not None else default_output_dir(),
                                           "profile_output_dir")

    def get_nrt_output_directory(self) -> str:
        """This process's folder: ``<profile_output_dir>/<host>_pid_<pid>``."""
        return os.fspath(self.output_dir / f"{socket.gethostname()}_pid_{os.getpid()}")

    def export_trace(self, prof) -> Path | None:
        """Write ``prof``'s Chrome trace to a new ``<timestamp>/trace.json`` of this process's
        folder and return its path (``None``, with a warning, if it cannot be written)."""
        stamp = time.strftime("%Y%m%dT%H%M%S") + f".{time.time_ns() % 10**9:09d}"
        folder = Path(self.get_nrt_output_directory()) / stamp
        path = folder / TRACE_FILE
        staged = folder / f".{TRACE_FILE}.partial"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(os.fspath(staged))
            os.replace(staged, path)
        except (OSError, RuntimeError) as exc:
            warnings.warn(f"neuron profiler: the trace was not written to {path}: {first_line(exc)}",
                          RuntimeWarning, stacklevel=2)
            with contextlib.suppress(OSError):
                staged.unlink(missing_ok=True)
            return None
        return path
