"""Registration of the ``neuron`` c10d backend and the one-core-per-rank rules.

As in the real product, a process started by torchrun owns exactly one
logical NeuronCore (index ``LOCAL_RANK``; ``runtime/profiles.py`` sets that up
and ``NEURON_RT_VISIBLE_CORES``) and must create its process group before it
touches the device: until then the first device allocation raises a clear
error instead of silently binding the process to a core.
"""
from __future__ import annotations

import torch.distributed as dist

from ..runtime.extension import _C
from ..runtime.errors import ConfigError
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

    from . import dtensor_random, fsdp_guard

    fsdp_guard.install()
    dtensor_random.install()
    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = set_timeout


def set_timeout(timeout, group=None) -> None:
    """``torch.distributed.set_timeout`` of PyTorch 2.14, which torch 2.13 has only as the
    group's method: TorchTitan shortens every group's timeout this way after its first step."""
    (group or dist.distributed_c10d._get_default_group()).set_timeout(timeout)


def create_process_group(store, rank: int, size: int, timeout):
    """The factory c10d calls for ``backend="neuron"`` (once per group). The group
    class is imported here, not at ``import torch``, to keep start-up cheap."""
    from .. import neuron
    from .process_group import ProcessGroupNeuron

    if neuron.config_error() is not None:
        raise ConfigError(str(neuron.config_error()))
    _C._set_init_error("")  # the process now has a group: device use is allowed
    neuron.init()  # as the real backend's runtime setup: a child forked later is in a bad fork
    return ProcessGroupNeuron(store, rank, size, timeout)
