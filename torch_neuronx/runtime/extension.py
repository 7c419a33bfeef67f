"""The C++ extension ``torch_neuronx._C``: the one place Python layers import it from.

``_C`` is the emulated device itself (``csrc/``: allocator, routes, kernel accounting),
loaded once when the package is imported. Every layer writes
``from ..runtime.extension import _C``; import-linter sees the extension as an import of
the root package (it is not Python source), so this module is the one import the layers
contract lets reach the root (``[tool.importlinter]`` in pyproject.toml).
"""
from .. import _C  # noqa: F401  (re-exported)

__all__ = ["_C"]
