"""``nn.Linear`` as FP8 matmuls, forward and backward, as torchao's float8 training recipe runs it.

Each matmul (the forward's, and the backward's two for the input's and the weight's gradients)
scales its operands by their absolute maxima into the FP8 range (dynamic tensor-wise scaling),
multiplies them with ``torch._scaled_mm`` (FP32 accumulation) and writes the result in the
activations' dtype. Forward operands use the more precise format, gradients the wider one
(torchao: e4m3 and e5m2); on an instance that refuses e4m3fn both are e5m2 (``fp8.py``). Used by
the drift measurement and by plans that project FP8 training; it needs no torchao.
"""
from __future__ import annotations

import torch

from . import fp8, precision


def formats(target: str | None = None) -> tuple[torch.dtype, torch.dtype]:
    """(forward, gradient) FP8 formats on the instance family ``target`` (``trn2``; default: the
    instance in force), under the precision flags in force."""
    family = target or precision.summary()["instance_family"]
    e4m3 = torch.float8_e4m3fn in fp8.supported(family, precision.flags())
    return (torch.float8_e4m3fn if e4m3 else torch.float8_e5m2), torch.float8_e5m2


def _quantized(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` scaled into ``dtype``'s range by its absolute maximum, and the scale that undoes it:
    one pass to find the maximum, one to scale and cast, in ``t``'s own dtype (a product that
    rounds a hair above the format's largest value still casts to it)."""
    top = torch.finfo(dtype).max
    amax = torch.linalg.vector_norm(t, float("inf")).float().clamp(min=1e-12)
    scale = (top / amax).to(t.dtype)
    return (t * scale).to(dtype), scale.float().reciprocal()


def scaled_matmul(a: torch.Tensor, b: torch.Tensor, a_dtype: torch.dtype, b_dtype: torch.dtype,
                  out_dtype: torch.dtype) -> torch.Tensor:
    """``a @ b`` (2-D) as one FP8 ``_scaled_mm``; ``b`` is quantized column-major, as it takes it."""
    aq, a_scale = _quantized(a, a_dtype)
    bq, b_scale = _quantized(b.t().contiguous(), b_dtype)
    return torch._scaled_mm(aq, bq.t(), scale_a=a_scale, scale_b=b_scale, out_dtype=out_dtype)


class _Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, forward_dtype, gradient_dtype) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.dtypes = forward_dtype, gradient_dtype
        return scaled_matmul(x, weight.t(), forward_dtype, forward_dtype, x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        forward_dtype, gradient_dtype = ctx.dtypes
        grad_x = scaled_matmul(grad, weight, gradient_dtype, forward_dtype, grad.dtype)
        grad_weight = scaled_matmul(grad.t(), x, gradient_dtype, forward_dtype, weight.dtype)
        return grad_x, grad_weight, None, None


class Fp8Linear(torch.nn.Module):
    """A ``linear`` whose matmuls run in FP8 (its bias is added in the activations' dtype)."""

    def __init__(self, linear: torch.nn.Linear, forward_dtype: torch.dtype, gradient_dtype: torch.dtype):
        super().__init__()
        self.linear, self.forward_dtype, self.gradient_dtype = linear, forward_dtype, gradient_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = _Fp8Matmul.apply(flat, self.linear.weight, self.forward_dtype, self.gradient_dtype)
        if self.linear.bias is not None:
            out = out + self.linear.bias
        return out.reshape(*x.shape[:-1], out.shape[-1])


def with_fp8_matmuls(model: torch.nn.Module, forward_dtype: torch.dtype | None = None,
                     gradient_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """``model`` with every ``nn.Linear`` an :class:`Fp8Linear` (in place); formats default to
    the instance's (:func:`formats`)."""
    default_forward, default_gradient = formats()
    forward_dtype, gradient_dtype = forward_dtype or default_forward, gradient_dtype or default_gradient
    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, Fp8Linear(child, forward_dtype, gradient_dtype))
        else:
            with_fp8_matmuls(child, forward_dtype, gradient_dtype)
    return model
