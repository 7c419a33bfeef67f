"""``print(neuron_tensor)`` without spurious 64-bit narrowing warnings."""
from __future__ import annotations

import torch

from .narrowing import narrowing_suspended


def install() -> None:
    """Format neuron tensors with narrowing suspended.

    ``print(t)`` computes ratios of the values in float64 on the tensor's own
    device (``torch._tensor_str``). Narrowing those temporaries would raise the
    one-time "a 64-bit value changed" warning for a tensor that has no 64-bit
    value at all, and change nothing the user sees.
    """
    original = torch._tensor_str._tensor_str

    def _tensor_str(self, indent):
        if self.device.type != "neuron":
            return original(self, indent)
        with narrowing_suspended():
            return original(self, indent)

    torch._tensor_str._tensor_str = _tensor_str
