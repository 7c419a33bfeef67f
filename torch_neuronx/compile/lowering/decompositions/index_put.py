"""``aten.index_put`` as a ``where`` or a scatter, as the real product's compile table writes it.

torch-mlir 20261001 fails ``index_put`` with a boolean mask (Gemma 3's ``ids[image_mask] = 0``
leaves a ``torch.constant.int`` unconverted). The real product never hands it one: the table
its backend passes to ``aot_autograd`` (TR ``neuron_dynamo_backend/decompositions.py:1889-1898``,
used at ``backend.py:283-303``) decomposes ``index_put`` (``:1044-1341``) into a ``where`` for a
boolean mask and one value, and into a scatter (a scatter-add when accumulating) into the flattened
tensor for integer indices, ``None`` (whole-dimension) positions and values broadcast to the
indexed shape. A boolean mask in any other form needs ``nonzero`` (a data-dependent shape): the
product refuses it (``:1160-1170``), and so does this backend, with :class:`UnsupportedOnNeuron`.
This table is the compile path's only: eager ``index_put`` is a kernel of its own on Trainium.
"""
from __future__ import annotations

from typing import Sequence

import torch

_MASK_DTYPES = (torch.bool, torch.uint8)  # a uint8 index is a (deprecated) mask for PyTorch too


class UnsupportedOnNeuron(RuntimeError):
    """A graph the real product's own compile decompositions refuse (``op``): the failure is shared."""

    def __init__(self, op: str, message: str):
        super().__init__(message)
        self.op = op


def _is_mask(index: torch.Tensor | None) -> bool:
    return index is not None and index.dtype in _MASK_DTYPES


def _mask_where(x: torch.Tensor, indices: Sequence[torch.Tensor | None], value: torch.Tensor) -> torch.Tensor:
    """One mask among whole-dimension (``None``) positions, one value: the value where the mask
    holds. The mask covers the dimensions after one per ``None`` before it (PyTorch's rule; the
    product's table broadcasts the mask from the first dimension, right only without a ``None``
    before it)."""
    position = next(i for i, index in enumerate(indices) if index is not None)
    mask = indices[position].to(torch.bool)
    trailing = x.dim() - position - mask.dim()
    placed = mask.reshape((1,) * position + tuple(mask.shape) + (1,) * trailing)
    return torch.where(placed, value.to(x.dtype).reshape(()), x)


def _non_negative(index: torch.Tensor, size: int) -> torch.Tensor:
    """A negative index counted from the end, as PyTorch reads it (a StableHLO gather clamps it)."""
    return torch.where(index < 0, index + size, index)


def _scatter(x: torch.Tensor, indices: Sequence[torch.Tensor | None], values: torch.Tensor,
             accumulate: bool) -> torch.Tensor:
    """Integer indices: the flat positions they select, found by indexing the positions of ``x``
    with them (PyTorch's own rules place the broadcast index dimensions and the ``None`` ones),
    then one scatter of the values broadcast to that shape."""
    indices = [None if index is None else _non_negative(index, x.shape[dim]) for dim, index in enumerate(indices)]
    positions = torch.arange(x.numel(), device=x.device).reshape(x.shape)
    selected = torch.ops.aten.index.Tensor(positions, indices)
    source = values.to(x.dtype).expand(selected.shape).reshape(-1)
    flat = x.reshape(-1)
    written = (flat.scatter_add(0, selected.reshape(-1), source) if accumulate
               else flat.scatter(0, selected.reshape(-1), source))
    return written.reshape(x.shape)


def index_put_as_scatter(x: torch.Tensor, indices: Sequence[torch.Tensor | None], values: torch.Tensor,
                         accumulate: bool = False) -> torch.Tensor:
    """``index_put(x, indices, values, accumulate)`` in ops torch-mlir lowers (``where``,
    ``index`` of an iota, ``scatter``/``scatter_add``), as the real product's compile table does.

    In the AOTAutograd table of ``backend="neuron"`` (:func:`aot_decompositions`), so that
    the graph Inductor runs on the host and the graph lowered are the product's."""
    masks = [index for index in indices if _is_mask(index)]
    if not masks:
        return _scatter(x, indices, values, accumulate)
    others = [index for index in indices if index is not None and not _is_mask(index)]
    if len(masks) == 1 and not others and values.numel() == 1 and not accumulate:
        return _mask_where(x, indices, values)
    if len(masks) == 1 and len(others) == 1 and masks[0].dim() == 1 and values.numel() == 1:
        raise NotImplementedError(
            "index_put with a 1-D boolean mask beside an integer index is not decomposed by the "
            "emulator (the real product's compile table writes it as a where: TR "
            "neuron_dynamo_backend/decompositions.py:1110-1158)")
    raise UnsupportedOnNeuron("aten.index_put", (
        "Boolean index_put is not supported in torch.compile on Neuron: this mask form needs nonzero(), "
        "a dynamic shape; only one mask among whole dimensions with one value, not accumulated, is a where "
        "(as the real product's compile table: TR neuron_dynamo_backend/decompositions.py:1160-1170)"))
