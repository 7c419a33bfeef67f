"""(helper) Precision settings and instance profiles switched for one test and put back."""
import contextlib
import os

import torch

import torch_neuronx
from torch_neuronx import accounting, numerics


def _set_env(values: dict) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def precision_env(**env):
    """The precision variables set as given (``None``: unset) and applied, as a process started
    with them would; the environment and the settings in force before are restored after."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        _set_env(env)
        numerics.configure()
        yield
    finally:
        _set_env(saved)
        numerics.configure()


@contextlib.contextmanager
def instance(name: str):
    """The emulated instance switched to ``name`` (``torch_neuronx.reconfigure``), and back."""
    before = torch.neuron.topology()
    capacity = torch_neuronx._C._device_capacity(0)
    saved = os.environ.get("TORCHNEURON_INSTANCE")
    try:
        torch_neuronx.reconfigure(instance=name)
        yield
    finally:
        _set_env({"TORCHNEURON_INSTANCE": saved})
        torch.neuron._configure(before, capacity)
        accounting.reconfigure(before)
        numerics.configure(before.profile)
