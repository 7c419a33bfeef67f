"""Autocast on ``neuron``.

The C++ core registers CUDA's autocast op lists for the device
(csrc/aten/AutocastRoutes.cpp). Trainium's fast dtype is bfloat16, so it is the
default of ``torch.autocast("neuron")`` when no dtype is given.
"""
from __future__ import annotations

import torch


def install() -> None:
    torch.set_autocast_dtype("neuron", torch.bfloat16)
