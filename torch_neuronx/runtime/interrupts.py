"""SIGTERM handled like Ctrl-C, so a command stops the same way for both: the
work in progress is dropped, the previous output is kept, one line is printed
and the exit code is 128 + the signal (130 for SIGINT, 143 for SIGTERM)."""
from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python would raise ``KeyboardInterrupt`` for SIGINT."""

    signum = signal.SIGTERM

    def __init__(self, pending: list[int] | None = None):
        super().__init__()
        self.pending = pending  # the block's record of it, cleared once it is reported


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Turn SIGTERM into :class:`Terminated` for the duration of the block.

    Python runs the handler wherever the main thread is, a finalizer or a library's broad
    ``except`` among those places, which swallow what it raises. A SIGTERM that arrived and was
    not reported (:func:`interrupt_signal`) is therefore raised again when the block ends, so it
    is never lost."""
    if threading.current_thread() is not threading.main_thread():  # handlers live in the main thread only
        yield
        return
    pending: list[int] = []

    def raise_terminated(signum, _frame):
        pending.append(signum)
        raise Terminated(pending)

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
    if pending:
        raise Terminated()


def interrupt_signal(exc: KeyboardInterrupt) -> signal.Signals:
    """The signal behind an interrupt: SIGTERM for :class:`Terminated`, else SIGINT. A command
    asks this to report the interrupt, so the interrupt counts as reported from then on."""
    if getattr(exc, "pending", None):
        exc.pending.clear()
    return signal.Signals(getattr(exc, "signum", signal.SIGINT))


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM back for a block that must not stop half-way (publishing
    files); a signal that arrives meanwhile is raised as its interrupt when the block ends.
    (Python handlers, not a signal mask: the mask is per thread, and torch's threads would
    take the signal for the process.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, _frame: arrived.append(signum)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if arrived:
        raise Terminated() if arrived[0] == signal.SIGTERM else KeyboardInterrupt()
