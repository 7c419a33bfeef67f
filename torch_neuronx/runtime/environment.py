"""Whether this process's environment variables can be used, asked when a command starts.

``import torch`` never fails on a bad value: the error is deferred to the first device
use (``torch_neuronx._register``). A command that may never touch the device (a plan, a
report written after a failed device check) asks here first, so that every command
reports the same one line naming the variable, before any work.
"""
from __future__ import annotations

from . import profiles, settings
from .errors import ConfigError


def first_error() -> ConfigError | None:
    """The error of the first unusable variable as the environment is now: a value its
    declaration refuses (``settings.py``), else a topology the variables describe that
    cannot exist (instance, cores, LNC, ranks per node)."""
    refused = settings.refused_values()
    if refused:
        return next(iter(refused.values()))
    try:
        profiles.resolve_topology()
    except ConfigError as exc:
        return exc
    return None
