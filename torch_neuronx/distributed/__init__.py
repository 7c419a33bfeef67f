"""Distributed training on ``neuron``: the c10d backend ``neuron`` (collectives
through gloo on zero-copy aliases of device memory), the torchrun rules of one
logical NeuronCore per rank, fault reports that name the failing rank, and a
guard against re-sharding an already sharded model with FSDP2.
See ``docs/distributed.md``.
"""
from .faults import DistributedFault  # noqa: F401
from .setup import BACKEND_NAME, install  # noqa: F401


def __getattr__(name):
    if name == "ProcessGroupNeuron":  # imported on first use: keeps `import torch` cheap
        from .process_group import ProcessGroupNeuron

        return ProcessGroupNeuron
    raise AttributeError(name)
