"""The migration pilot: one command that runs the procedure for moving a job to Trainium.

``torchneuron pilot`` (``torch_neuronx/cli/pilot.py``) parses options into a
:class:`PilotConfig` and hands it to :func:`run_pilot`, which runs the steps
(known inputs, numerics, output quality, fine-tune, checkpoint, compilation,
performance, cost) and writes ``report.json`` + ``report.html``.
"""
from .config import PilotConfig, PilotError
from .procedure import run_pilot

__all__ = ["PilotConfig", "PilotError", "run_pilot"]
