"""The ``torch_neuronx`` logger, levelled by ``TORCH_NEURONX_LOG_LEVEL``.

The real product reads the same variable as a number (0 quiet … 3 debug);
level names are accepted too. Messages go to stderr through one handler of
our own so that they show up without the application configuring logging.
"""
from __future__ import annotations

import logging

from . import settings

LOGGER_NAME = "torch_neuronx"
_NUMERIC_LEVELS = {"0": logging.ERROR, "1": logging.WARNING, "2": logging.INFO, "3": logging.DEBUG}


def _level_from_env() -> int:
    """The level of ``TORCH_NEURONX_LOG_LEVEL``: its registry entry lists the values it takes."""
    raw = settings.get_choice("TORCH_NEURONX_LOG_LEVEL")
    return _NUMERIC_LEVELS.get(raw) or logging.getLevelName(raw.upper())


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
