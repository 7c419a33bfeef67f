"""Typed reads of the environment variables the project honours.

Names follow the real product where one exists (``NEURON_*``,
``TORCH_NEURONX_*``); project-only switches are prefixed ``TORCHNEURON_``.
Every variable is listed, with its default, in ``docs/configuration.md``.
"""
from __future__ import annotations

import os

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """An environment variable has a value the runtime cannot use."""


def env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off")


def env_int(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None


def env_str(name: str, default: str | None) -> str | None:
    raw = os.environ.get(name)
    return default if raw is None or raw.strip() == "" else raw.strip()


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = (env_str(name, default) or default).lower()
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value
