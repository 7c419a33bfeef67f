"""The ``torch_neuronx`` logger, levelled by ``TORCH_NEURONX_LOG_LEVEL``.

The real product reads the same variable as a number (0 quiet … 3 debug);
level names are accepted too. Messages go to stderr through one handler of
our own so that they show up without the application configuring logging.
"""
from __future__ import annotations

import logging

from . import settings
from .errors import ConfigError

LOGGER_NAME = "torch_neuronx"
_NUMERIC_LEVELS = {"0": logging.ERROR, "1": logging.WARNING, "2": logging.INFO, "3": logging.DEBUG}


def _level_from_env() -> int:
    raw = settings.get_str("TORCH_NEURONX_LOG_LEVEL")
    if raw in _NUMERIC_LEVELS:
        return _NUMERIC_LEVELS[raw]
    level = logging.getLevelName(raw.upper())
    if not isinstance(level, int):
        raise ConfigError(
            f"TORCH_NEURONX_LOG_LEVEL={raw!r} is not 0-3 or a logging level name "
            "(DEBUG, INFO, WARNING, ERROR)"
        )
    return level


def configure() -> logging.Logger:
    """Set the level from the environment and attach the stderr handler once."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(_level_from_env())
    if not any(getattr(h, "_torchneuron", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("torch_neuronx %(levelname)s: %(message)s"))
        handler._torchneuron = True
        logger.addHandler(handler)
        logger.propagate = False
    return logger


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{name}")
