"""Single-op rewrites into ops torch-mlir lowers, each the real product's or an equivalent form.

Each takes the op's ATen arguments and returns its value (or ``NotImplemented`` to keep the op
as it is); the tables in ``decompositions/__init__.py`` say where each applies.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


def view_as_reshape(tensor: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return torch.ops.aten._unsafe_view.default(tensor.contiguous(), size)


def slice_scatter_in_bounds(base, src, dim=0, start=None, end=None, step=1):
    """``slice_scatter`` with ``start``/``end`` clamped to the dimension, as PyTorch reads them.

    A slice "to the end" carries ``end = 2**63 - 1`` (the backward of ``x[..., n:]``,
    e.g. Llama's ``rotate_half``). torch-mlir 20261001 lowers ``slice_scatter`` to a
    ``stablehlo.scatter`` whose index constant it builds from ``start`` to the
    unclamped ``end``: the lowering allocated memory until the process was killed
    (17 GB on a tiny Llama's backward graph). Same values, bounded indices.
    """
    lo, hi, _ = slice(start, end, step).indices(base.shape[dim])
    hi = max(hi, lo)  # an empty slice, as PyTorch clamps it
    if (start, end) == (lo, hi):
        return NotImplemented  # already in bounds: trace the op itself
    return torch.ops.aten.slice_scatter.default(base, src, dim, lo, hi, step)


def fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``prims.fma`` as ``a * b + c`` in the operands' dtype.

    An Inductor-only primitive: the AOTAutograd decompositions this backend shares
    with Inductor (``select_decomp_table``) write ``_softmax_backward_data`` with it,
    so every eager-attention backward graph holds one. The real product traces with
    its own decompositions, which never produce it; torch-mlir has no lowering.
    The product's compiler may contract the pair into one FMA; the StableHLO
    check and the graph key only need the operation.
    """
    return a * b + c


def rev_as_flip(a: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """``prims.rev`` as ``aten.flip``, which torch-mlir lowers (``stablehlo.reverse``).

    Inductor's decomposition table, which this backend shares, writes ``flip`` (Mamba-2's and
    Falcon-H1's chunked scans) as the primitive; the real product traces with its own table,
    and ``flip`` is a core ATen op that PyTorch's core decompositions keep."""
    return torch.ops.aten.flip.default(a, dims)


def histc_by_scatter_add(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    """``aten.histc`` as a scatter-add of ones into ``bins`` counters, which torch-mlir lowers.

    The real product's compile table decomposes ``histc`` the same way
    (TR ``neuron_dynamo_backend/decompositions.py:1827-1868``, in the table its backend passes to
    ``aot_autograd``, ``:1889-1898``), so the MoE routers' token counts lower on Trainium. The
    bins follow PyTorch's CPU kernel: ``min == max`` takes the data's range (widened by 1 on each
    side when the data is constant), a value's bin is ``(v - min) / (max - min) * bins``, ``max``
    itself falls in the last bin, values outside are not counted. Integer inputs (the token counts)
    are binned in float64, exactly, and counted in their own dtype. In the AOTAutograd table of
    ``backend="neuron"`` too (:func:`aot_decompositions`): the graph Inductor runs on the
    host then counts integers as the device kernel does (PyTorch's CPU ``histc`` takes no integers)."""
    values = x.reshape(-1) if x.is_floating_point() else x.reshape(-1).to(torch.float64)
    if min == max:
        low, high = torch.aminmax(values)
        constant = low == high
        low, high = torch.where(constant, low - 1, low), torch.where(constant, high + 1, high)
    else:
        low, high = float(min), float(max)
    inside = (values >= low) & (values <= high)
    position = ((values - low) / (high - low) * bins).to(torch.int64).clamp(0, bins - 1)
    counts = torch.zeros(bins, dtype=torch.int64, device=x.device)
    return counts.scatter_add(0, position, inside.to(torch.int64)).to(x.dtype)


def conv1d_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                     output_padding, groups, output_mask):
    """``convolution_backward`` of a 1-D convolution (Mamba's causal conv1d, depthwise) as
    convolutions, slices and a matmul, which torch-mlir lowers; it fails on the op itself
    (``torch.constant.int`` left). The real product's compile table decomposes it into
    convolutions too (TR ``neuron_dynamo_backend/decompositions.py:1615-1801``). Other
    convolutions keep the op (``NotImplemented``)."""
    if transposed or input.dim() != 3:
        return NotImplemented
    (s,), (p,), (d,) = stride, padding, dilation
    taps, steps = weight.shape[-1], grad_output.shape[-1]
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:  # the transposed convolution, padded back to the input's length
        covered = (steps - 1) * s - 2 * p + d * (taps - 1) + 1
        grad_input = torch.ops.aten.convolution.default(
            grad_output, weight, None, [s], [p], [d], True, [input.shape[-1] - covered], groups)
    if output_mask[1]:  # each tap's input window against the output gradient, per group
        n, channels, _ = input.shape
        padded = torch.nn.functional.pad(input, (p, p))
        windows = torch.stack([padded[:, :, k * d: k * d + s * (steps - 1) + 1: s] for k in range(taps)], dim=-1)
        windows = windows.reshape(n, groups, channels // groups, steps, taps)
        per_group = grad_output.reshape(n, groups, -1, steps)
        grad_weight = torch.einsum("ngitk,ngot->goik", windows, per_group).reshape(weight.shape)
    if output_mask[2]:
        grad_bias = grad_output.sum((0, 2))
    return grad_input, grad_weight, grad_bias


def scalar_as_tensor(tensor_form: torch._ops.OpOverload) -> Callable[[torch.Tensor, Any], torch.Tensor]:
    """An op's Scalar form as its Tensor form with a 0-dim operand of the result dtype.

    torch-mlir 20261001 lowers ``fmod.Tensor`` but leaves the Python-scalar operand
    of ``fmod.Scalar`` unconverted ("failed to legalize torch.constant.int"), and
    has no pattern for the Scalar forms of the bitwise ops: a defect of the
    converter, not an op Trainium lacks (the same op with a tensor operand
    lowers). Mistral's and Gemma's sliding-window cache index with ``fmod``.
    """
    def as_tensor(x: torch.Tensor, scalar: Any) -> torch.Tensor:
        dtype = torch.result_type(x, scalar)  # a wrapped number's promotion, kept by a 0-dim tensor
        return tensor_form(x, torch.ops.aten.scalar_tensor.default(scalar, dtype=dtype))

    return as_tensor


def topk_sorted(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """``topk(sorted=False)`` as ``topk(sorted=True)``: torch-mlir 20261001 lowers only the
    sorted form and leaves the ``False`` flag unconverted; "unsorted" leaves the order to the
    kernel, so a sorted result is a valid one (MoE routers of GLM-4 MoE, DeepSeek-V3 pass False).
    """
    if sorted:
        return NotImplemented  # already the form torch-mlir lowers: trace the op itself
    return torch.ops.aten.topk.default(x, k, dim, largest, True)


SCALAR_FORMS = {
    torch.ops.aten.fmod.Scalar: torch.ops.aten.fmod.Tensor,
    torch.ops.aten.bitwise_or.Scalar: torch.ops.aten.bitwise_or.Tensor,
    torch.ops.aten.bitwise_xor.Scalar: torch.ops.aten.bitwise_xor.Tensor,
    torch.ops.aten.bitwise_left_shift.Tensor_Scalar: torch.ops.aten.bitwise_left_shift.Tensor,
    torch.ops.aten.bitwise_right_shift.Tensor_Scalar: torch.ops.aten.bitwise_right_shift.Tensor,
}
