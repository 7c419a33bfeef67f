"""Signature listeners: code that wants to see each new eager kernel.

The C++ accounting reports every signature new to this process once (again
after ``reset_metrics()`` / ``clear_op_tracking()``, which forget what was
seen). After the accounting has counted it, each listener is called as
``fn(op, key, args)``: ``op`` is the full overload name (``aten::add.Tensor``),
``key`` the signature's hex key (the one ``_C._signature_calls()`` counts),
``args`` the call's arguments with every tensor replaced by a ``meta`` tensor
of the same sizes, strides and dtype — enough to trace or lower the op
(projection, StableHLO lowering) without its data.

A listener that raises is reported once as a warning and never breaks the op.
Listeners run outside Dynamo even when the op runs inside a compiled function
(between two graphs): Dynamo never traces them (``accounting._keep_dynamo_out``).
"""
from __future__ import annotations

import warnings
from typing import Callable

Listener = Callable[[str, str, tuple], None]

_listeners: list[Listener] = []
_warned: set[int] = set()  # ids of listeners whose failure was reported


def add_signature_listener(fn: Listener) -> Listener:
    """Call ``fn(op, key, args)`` for every new signature; returns ``fn``."""
    if not callable(fn):
        raise TypeError(f"a signature listener must be callable, got {type(fn).__name__}")
    if fn not in _listeners:
        _listeners.append(fn)
    return fn


def remove_signature_listener(fn: Listener) -> None:
    """Stop calling ``fn``; a listener that was never added is a ValueError."""
    try:
        _listeners.remove(fn)
    except ValueError:
        raise ValueError(f"{fn!r} is not a signature listener") from None
    _warned.discard(id(fn))


def notify(op: str, key: str, args: tuple) -> None:
    for fn in tuple(_listeners):
        try:
            fn(op, key, args)
        except Exception as exc:  # a listener must never break the op it observes
            if id(fn) not in _warned:
                _warned.add(id(fn))
                warnings.warn(f"signature listener {getattr(fn, '__qualname__', fn)!r} failed on {op} "
                              f"(reported once): {type(exc).__name__}: {exc}", RuntimeWarning,
                              stacklevel=2)
