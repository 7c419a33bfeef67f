"""What Inductor finds when it is handed ``neuron`` tensors directly (``backend="inductor"``).

Inductor looks up ``Scheduling`` and the wrapper code generators of a
PrivateUse1 device on its device module (``torch.neuron``). Inductor's GPU-style
device paths do not fit a host-emulated device, so instead of a ``KeyError``
deep inside lowering the user is told to use the backend that works.
"""
from __future__ import annotations

MESSAGE = (
    "backend='inductor' cannot compile graphs on neuron tensors. Use "
    "torch.compile(model, backend='neuron'): it runs AOTAutograd and Inductor's code "
    "generation for the neuron device (with static shapes and the persistent compile cache)."
)


class _Refuse(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(MESSAGE)


class UnsupportedNeuronCodegen(metaclass=_Refuse):
    """Registered as every Inductor code generator for ``neuron``; any use raises ``MESSAGE``."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(MESSAGE)

    @classmethod
    def create(cls, *args, **kwargs):
        raise NotImplementedError(MESSAGE)

