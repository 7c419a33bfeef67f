"""Work in a child Python process over one small protocol: JSON requests in, marked JSON events out.

Used where a fresh interpreter is the point (the pilot's checkpoint reload) or
isolation is (the coverage sweep survives a model that segfaults or hangs).
The parent writes one JSON request per line to the child's stdin; the child
answers on a private copy of its stdout with lines starting with
:data:`MARKER` — ``ready`` once, then any number of ``progress`` events and one
``result`` (or ``error``) per request. Libraries may print what they like: the
child's own stdout goes to its stderr, which the parent sends to a log file.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..runtime.errors import first_line

MARKER = "@@torchneuron-child@@ "


class ChildFailed(RuntimeError):
    """The child died, timed out, or its handler raised; ``reason`` is ``exited``, ``timeout`` or ``error``."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class ChildProcess:
    """A ``python -m MODULE`` child that serves requests until stopped; restarted on demand after a failure."""

    def __init__(self, module: str, args: tuple[str, ...] = (), log_path: Path | None = None,
                 ready_timeout: float = 300.0):
        self.module, self.args, self.log_path, self.ready_timeout = module, tuple(args), log_path, ready_timeout
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        self.events: queue.Queue = queue.Queue()
        log = open(self.log_path, "a") if self.log_path else subprocess.PIPE
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1)
        if self.log_path:
            log.close()
        else:
            threading.Thread(target=self._keep_tail, args=(self.proc,), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc, self.events), daemon=True).start()
        event = self._next(time.monotonic() + self.ready_timeout)
        if not isinstance(event, dict) or event.get("event") != "ready":
            reason = self._ended(event)
            self.stop()
            raise ChildFailed("exited", f"{self.module} did not start: {reason}")

    def _keep_tail(self, proc: subprocess.Popen) -> None:
        """Without a log file, keep the last stderr lines to explain a crash."""
        self.stderr_tail: list[str] = []
        for line in proc.stderr:
            if line.strip():
                self.stderr_tail = (self.stderr_tail + [line.rstrip()])[-20:]

    @staticmethod
    def _read(proc: subprocess.Popen, events: queue.Queue) -> None:
        for line in proc.stdout:
            if line.startswith(MARKER):
                events.put(json.loads(line[len(MARKER):]))
        events.put(None)  # end of stream: the process exited

    def _next(self, deadline: float):
        try:
            return self.events.get(timeout=max(deadline - time.monotonic(), 0.001))
        except queue.Empty:
            return "timeout"

    def _ended(self, event) -> str:
        if event == "timeout":
            return "timed out"
        code = self.proc.wait()
        tail = getattr(self, "stderr_tail", None)
        return f"exit code {code}" + (f": {tail[-1]}" if tail else "")

    def request(self, payload: dict, timeout: float, on_event: Callable[[dict], None] = lambda event: None) -> dict:
        """Send one request; return its result, passing progress events to ``on_event`` on the way."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            event = self._next(deadline)
            if not isinstance(event, dict):
                reason = "timeout" if event == "timeout" else "exited"
                message = self._ended(event)
                self.stop()
                raise ChildFailed(reason, f"timed out after {timeout:.0f}s" if reason == "timeout" else message)
            if event["event"] == "result":
                return event["result"]
            if event["event"] == "error":
                raise ChildFailed("error", event["message"])
            on_event(event)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(handle: Callable[[dict, Callable[[dict], None]], dict]) -> int:
    """The child's side: answer each request line with ``handle(request, emit)``'s result.

    ``emit(event)`` sends a progress event (a dict) to the parent. A handler that
    raises sends one ``error`` event with the exception's first line and the
    child goes on serving.
    """
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def emit(event: dict) -> None:
        out.write(MARKER + json.dumps(event) + "\n")
        out.flush()

    emit({"event": "ready"})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = handle(json.loads(line), lambda event: emit({"event": "progress", **event}))
        except Exception as exc:  # the parent decides what a failed request means
            emit({"event": "error", "message": first_line(exc)})
        else:
            emit({"event": "result", "result": result})
    return 0
