"""Make ``import nki`` (and ``nki.language``, ``nki.isa``) resolve to this emulation.

Only when the real ``nki`` package is not importable: the finder asks every
other finder first and steps aside if one finds it, so an installed Neuron SDK
always wins (also an editable install, whose finder sits on sys.meta_path). Installed by ``import torch_neuronx`` (which plain
``import torch`` triggers through the backend autoload); a script whose first
line is ``import nki`` runs through ``python -m torch_neuronx.nki script.py``.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

_ALIAS = "nki"
_TARGET = "torch_neuronx.nki"


def real_nki_installed() -> bool:
    """Would any other finder (sys.path, editable installs, zip imports) import an ``nki``?"""
    for finder in sys.meta_path:
        if isinstance(finder, NkiFinder) or not hasattr(finder, "find_spec"):
            continue
        if finder.find_spec(_ALIAS, None) is not None:
            return True
    return False


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system our module object itself, so ``nki.language is torch_neuronx.nki.language``."""

    def __init__(self, target: str):
        self.target = target
        self.own_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self.own_spec  # keep the module's own identity under its real name


class NkiFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != _ALIAS and not fullname.startswith(_ALIAS + "."):
            return None
        parent = sys.modules.get(_ALIAS)
        if fullname == _ALIAS:
            if real_nki_installed():
                return None
        elif parent is None or parent.__name__ != _TARGET:
            return None  # a submodule of the real package
        target_name = _TARGET + fullname[len(_ALIAS):]
        if importlib.util.find_spec(target_name) is None:
            return None
        is_package = target_name == _TARGET
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name), is_package=is_package)


def install() -> None:
    """Put the finder first on sys.meta_path (it defers to any real ``nki`` itself)."""
    if not any(isinstance(f, NkiFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, NkiFinder())
