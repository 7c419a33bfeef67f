"""``torch.profiler`` on the ``neuron`` device: the projected device timeline.

As on the real product (``torch_neuronx.profiling``), a device profile is PyTorch's
own ``torch.profiler.profile`` with ``ProfilerActivity.PrivateUse1`` and, optionally,
a ``NeuronConfig``. The device's activity profiler (``csrc/profiler/``) gives
Kineto one event per eager kernel, compiled graph and collective, lasting its
**projected** Trainium time, placed where an asynchronous device would run it
(``timeline.py``), linked to the CPU op that issued it; so ``key_averages()``
has a device-time column and ``export_chrome_trace()`` a device timeline with
a track per engine. See ``docs/profiling.md``.
"""
from __future__ import annotations

from .capture import start_from_environment
from .config import NeuronConfig, ProfileMode
from .export import NeuronProfiler
from .session import last_timeline

__all__ = ["NeuronConfig", "NeuronProfiler", "ProfileMode", "install", "last_timeline"]


def install() -> None:
    """Register the device's activity profiler; start the environment's capture if asked."""
    from . import session

    session.install()
    start_from_environment()
