"""The two errors an emulated kernel raises besides its own assertions."""
from __future__ import annotations


class NkiValidationError(ValueError):
    """A kernel breaks a hardware rule (partitions, capacity, operand buffers, tile sizes).

    The same name as ``nki.isa.NkiValidationError`` in the real package.
    """


class NotEmulatedError(NotImplementedError):
    """The kernel calls a real NKI API this emulator does not implement yet."""

    def __init__(self, api: str, detail: str = ""):
        super().__init__(
            f"{api} is not emulated yet by torch_neuronx.nki"
            + (f" ({detail})" if detail else "")
            + "; see docs/nki.md for the emulated API, or run the kernel with the real `nki` package")
        self.api = api


def module_getattr(module: str, known: frozenset[str]):
    """A module ``__getattr__``: real API names we lack raise NotEmulatedError, others AttributeError."""

    def __getattr__(name: str):
        if name in known:
            raise NotEmulatedError(f"{module}.{name}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
