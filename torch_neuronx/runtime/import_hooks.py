"""Adjusting a PyTorch module once it is imported, without importing it early.

``import torch`` must stay cheap, so the PyTorch modules this backend
adjusts (FSDP2's ``fully_shard``, DTensor's RNG tracker, Inductor's entry point) are not imported
then: a finder on ``sys.meta_path`` lets the normal finders load the module
the first time anything imports it and runs the adjustment right after.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds one module through the normal finders and runs ``callback`` after it executes."""

    def __init__(self, name: str, callback: Callable) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module
        callback = self.callback

        def exec_module(module):
            run(module)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, callback: Callable) -> None:
    """Run ``callback(module)`` now if ``name`` is imported, else right after its first import."""
    if name in sys.modules:
        callback(sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))
