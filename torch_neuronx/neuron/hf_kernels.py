"""Two device behaviours Transformers relies on that the CPU fallback alone does not give.

Added by the pilot/coverage work (issue 7), where the architecture sweep found them:

* ``Module.to("neuron")`` kept tied parameters (input embeddings = LM head) tied
  only if CPU and neuron tensors are "shallow-copy compatible", as CPU and CUDA
  are. c10 lists only built-in backends, so ties broke, the LM head trained as a
  separate matrix and gradients differed from CPU on every tied-embedding model
  (GPT-2, Gemma, OPT, BLOOM, Falcon, Whisper…). PyTorch's documented remedy is
  to override ``aten::_has_compatible_shallow_copy_type`` for the backend.
* Transformers' MoE layers count tokens per expert with ``torch.histc`` on an
  *integer* tensor on every non-CPU device (CUDA supports it); the CPU kernel
  the fallback runs accepts only floating point. Integer inputs are counted in
  float64 (exact for any count a tensor can hold) and returned in their dtype.
"""
from __future__ import annotations

import torch

_LIB = torch.library.Library("aten", "IMPL")  # kept alive for the life of the process


def _dense(t: torch.Tensor) -> bool:
    return t.layout == torch.strided and t.device.type in ("cpu", "neuron")


def _has_compatible_shallow_copy_type(self: torch.Tensor, other: torch.Tensor) -> bool:
    return _dense(self) and _dense(other)


def _histc(self: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:  # noqa: A002
    if self.is_floating_point():
        return torch.histc(self.cpu(), bins, min, max).to(self.device)
    counts = torch.histc(self.cpu().double(), bins, min, max)
    return counts.to(self.dtype).to(self.device)


def install() -> None:
    _LIB.impl("_has_compatible_shallow_copy_type", _has_compatible_shallow_copy_type, "PrivateUse1")
    _LIB.impl("histc", _histc, "PrivateUse1")
