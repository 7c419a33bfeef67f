"""Turning a failed collective into an error that names the rank at fault.

When a peer crashes or raises, gloo only reports a closed socket or a timeout
(``Connection closed by peer [127.0.0.1]:41234``), which does not say which
rank went away. Each rank publishes its host and pid in the group's store when
the group is created; on failure the survivors look those processes up and
name the ones that have exited. Peers on other hosts cannot be inspected and
are reported as such.
"""
from __future__ import annotations

import os
import socket
import time

import torch.distributed as dist

from ..runtime import settings


class DistributedFault(RuntimeError):
    """A collective failed because a peer rank died, raised or stalled."""


def _process_state(pid: int) -> str | None:
    """'exited', 'exited (zombie)' or None if the process is still running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return "exited"
    return "exited" if state in ("Z", "X") else None


class PeerTable:
    """Where every rank of one group runs (host, pid, global rank)."""

    def __init__(self, store: dist.Store, rank: int, size: int):
        self.store = store
        self.rank = rank
        self.host = socket.gethostname()
        me = f"{self.host}|{os.getpid()}|{settings.get_str('RANK', str(rank))}"
        store.set(f"neuron_peer/{rank}", me)
        raw = store.multi_get([f"neuron_peer/{r}" for r in range(size)])
        self.peers = [bytes(v).decode().split("|") for v in raw]

    def _reported_fault(self, rank: int) -> bool:
        """Did ``rank`` stop because it saw an earlier failure (not the culprit)?"""
        try:
            return self.store.check([f"neuron_fault/{rank}"])
        except Exception:  # the store's host may be gone too
            return False

    def _exited(self, grace: float) -> list[int]:
        """Local peers that have exited, waiting up to ``grace`` s for one to finish
        dying (a rank that raised closes its sockets before its process ends)."""
        deadline = time.monotonic() + grace
        while True:
            gone = [r for r, (host, pid, _) in enumerate(self.peers)
                    if r != self.rank and host == self.host and _process_state(int(pid))]
            if gone or time.monotonic() >= deadline:
                return gone
            time.sleep(0.05)

    def explain(self, what: str, group: str, exc: BaseException) -> str:
        try:
            self.store.set(f"neuron_fault/{self.rank}", what)
        except Exception:
            pass
        timed_out = "imed out" in str(exc) or "imeout" in str(exc)
        exited = self._exited(grace=0.0 if timed_out else 3.0)
        culprits = [r for r in exited if not self._reported_fault(r)] or exited
        remote = [f"rank {r} (global rank {g}, host {h})"
                  for r, (h, _, g) in enumerate(self.peers) if h != self.host]

        def name(r: int) -> str:
            return f"rank {r} (global rank {self.peers[r][2]}, pid {self.peers[r][1]})"

        if culprits:
            cause = (f"{', '.join(map(name, culprits))} of this group exited before finishing "
                     "it (it crashed or raised: see that rank's own error output)")
        elif timed_out:
            cause = ("every local peer is still running, so one of them did not reach "
                     "this collective within the process-group timeout (a hang, or "
                     "ranks issuing different collectives)")
        else:
            cause = "no local peer has exited"
        if remote and not culprits:
            cause += f"; peers on other hosts were not checked: {', '.join(remote)}"
        return (f"neuron process group: {what} on {group} failed at rank {self.rank}: "
                f"{cause}. gloo said: {exc}")
