"""Registration of the ``neuron`` c10d backend and the one-core-per-rank rules.

As in the real product, a process started by torchrun owns exactly one
logical NeuronCore (index ``LOCAL_RANK``; ``runtime/profiles.py`` sets that up
and ``NEURON_RT_VISIBLE_CORES``) and must create its process group before it
touches the device: until then the first device allocation raises a clear
error instead of silently binding the process to a core.
"""
from __future__ import annotations

import atexit
import logging

import torch.distributed as dist

from .. import _C
from ..runtime.profiles import Topology

BACKEND_NAME = "neuron"

INIT_ORDER_ERROR = (
    "This process was started by a distributed launcher (torchrun: LOCAL_RANK={local_rank}, "
    "LOCAL_WORLD_SIZE={local_world}) and touched the neuron device before the process group "
    "existed. Call torch.distributed.init_process_group('neuron') (or with no backend) first; "
    "each rank then owns logical NeuronCore neuron:{local_rank}, as on real Trainium."
)


def install(topology: Topology) -> None:
    """Register the backend; in a torchrun job, forbid device use before init."""
    if not dist.is_available():
        return
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND_NAME, create_process_group, devices=["neuron"])
    if topology.distributed and not _C._is_initialized() and not dist.is_initialized():
        _C._set_init_error(INIT_ORDER_ERROR.format(
            local_rank=topology.default_device, local_world=topology.device_count))

    from . import fsdp_guard

    fsdp_guard.install()


def create_process_group(store, rank: int, size: int, timeout):
    """The factory c10d calls for ``backend="neuron"`` (once per group). The group
    class is imported here, not at ``import torch``, to keep start-up cheap."""
    from .process_group import ProcessGroupNeuron

    _C._set_init_error("")  # the process now has a group: device use is allowed
    if not _exit_hook_registered:
        _register_exit_hook()
    return ProcessGroupNeuron(store, rank, size, timeout)


_exit_hook_registered = False


def _register_exit_hook() -> None:
    global _exit_hook_registered
    atexit.register(destroy_groups_at_exit)
    _exit_hook_registered = True


def destroy_groups_at_exit() -> None:
    """Destroy the process groups a script left alive, while Python still runs.

    gloo's worker threads drop their finished work (which holds the zero-copy
    aliases the group handed them) a moment after a collective returns. If
    that happens during interpreter finalization, releasing a tensor that has
    a Python object needs the GIL, which a finalizing interpreter no longer
    gives: the thread is torn down and the process aborts with "terminate
    called without an active exception" (seen in about 4 of 10 two-rank
    torchrun runs that ended without ``destroy_process_group()``). Destroying
    the groups at exit, as a well-behaved script does itself, and releasing
    the gloo backends of groups the script still references, joins those
    threads first. Registered when the first ``neuron`` group is created, so it
    runs after any exit handler the script registers later.
    """
    from .process_group import release_backends

    try:
        if dist.is_initialized():
            dist.destroy_process_group()
        release_backends()  # groups the script still references
    except Exception as exc:  # exiting anyway: report, never mask the exit status
        logging.getLogger("torch_neuronx.distributed").warning(
            "destroying the process group at exit failed: %s", exc)
