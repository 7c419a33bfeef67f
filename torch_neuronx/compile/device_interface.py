"""Dynamo's ``DeviceInterface`` for ``neuron``: how compiled code asks about the device.

Dynamo consults it when a traced program touches device state (current
device, streams, synchronisation); everything forwards to ``torch.neuron``.
"""
from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device


class NeuronInterface(DeviceInterface):
    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.neuron.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.neuron.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            return torch.neuron.get_device_properties(device)

    device = torch.neuron.device  # type: ignore[assignment]
    Event = torch.neuron.Event  # type: ignore[assignment]
    Stream = torch.neuron.Stream  # type: ignore[assignment]

    @staticmethod
    def current_device() -> int:
        return torch.neuron.current_device()

    @staticmethod
    def set_device(device: torch.types.Device) -> None:
        torch.neuron.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return NeuronInterface.exchange_device(device)

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = torch.neuron.current_device()
        if device >= 0 and device != previous:
            torch.neuron.set_device(device)
        return previous

    @staticmethod
    def device_count() -> int:
        return torch.neuron.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.neuron.is_available()

    @staticmethod
    def stream(stream: torch.Stream) -> Any:
        return torch.neuron.stream(stream)

    @staticmethod
    def current_stream() -> torch.Stream:
        return torch.neuron.current_stream()

    @staticmethod
    def set_stream(stream: torch.Stream) -> None:
        torch.neuron.set_stream(stream)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def synchronize(device: torch.types.Device = None) -> None:
        torch.neuron.synchronize(device)

    @classmethod
    def get_device_properties(cls, device: torch.types.Device = None) -> Any:
        return torch.neuron.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        return torch.neuron.get_device_properties(device).name

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return torch.neuron.is_bf16_supported(including_emulation)

    @staticmethod
    def memory_allocated(device: torch.types.Device = None) -> int:
        return torch.neuron.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False


def register() -> None:
    register_interface_for_device("neuron", NeuronInterface)
    for index in range(torch.neuron.device_count()):
        register_interface_for_device(f"neuron:{index}", NeuronInterface)
