"""DTensor random ops on ``neuron``: each shard draws what the whole tensor would.

PyTorch's ``OffsetBasedRNGTracker`` (``torch/distributed/tensor/_random.py``)
runs every random op on a DTensor inside ``_distribute_region``: it reads the
device generator's state as Philox (seed, offset), moves the offset to
``shard_linear_index * local_numel`` for the op, and afterwards sets every
rank's offset to the old one plus the tensor's size (rounded up to 4), so
ranks stay in step. Replicas draw alike and shards draw differently; whether a
shard equals the same slice of an unsharded draw depends on the device's
generator, and for shards of dim 1 or of two mesh dimensions no offset could
make it so.

The ``neuron`` generator is counter-based (``csrc/runtime/Generators.h``):
element k of a draw comes from counter ``offset + k``. The tracker is
specialised for neuron meshes: instead of moving the offset, it gives the
generator each local element's row-major index in the whole tensor (from
PyTorch's own shard-offset computation, ``_StridedShard`` included), so
element ``i`` of the global tensor always comes from counter ``offset + i``.
A sharded ``torch.nn.init`` or dropout then equals the unsharded one for any
layout (FSDP2, TP, both, uneven shards) and any world size, and the offset
after the op is the tracker's own. Other devices keep PyTorch's tracker
unchanged.
"""
from __future__ import annotations

import contextlib

import torch

from ..runtime.extension import _C
from ..runtime.import_hooks import after_import

_TARGET = "torch.distributed.tensor._random"


def global_index(spec) -> torch.Tensor:
    """Each local element's row-major index in the whole tensor of ``spec``
    (a DTensorSpec), as a CPU int64 tensor of the local shape."""
    from torch.distributed.tensor._utils import _get_shard_size_and_offsets
    from torch.distributed.tensor.placement_types import Shard, _StridedShard

    shape = list(spec.shape)
    mesh = spec.mesh
    coordinate = mesh.get_coordinate()
    local = list(shape)
    along: dict[int, torch.Tensor] = {}  # tensor dim -> global indices of the local rows
    for mesh_dim, placement in enumerate(spec.placements):
        if not isinstance(placement, (Shard, _StridedShard)):
            continue
        dim = placement.dim
        size, offsets = _get_shard_size_and_offsets(
            local[dim], mesh.size(mesh_dim), coordinate[mesh_dim], placement,
            along.get(dim), shape[dim], False)
        local[dim] = size
        along[dim] = offsets[:size]
    index = torch.zeros(local, dtype=torch.int64)
    stride = 1
    for dim in reversed(range(len(shape))):
        rows = along.get(dim, torch.arange(shape[dim]))
        view = [1] * len(shape)
        view[dim] = local[dim]
        index += rows.view(view) * stride
        stride *= shape[dim]
    return index


def _neuron_tracker(base: type) -> type:
    """``base`` (PyTorch's OffsetBasedRNGTracker) with global-index draws on neuron meshes."""

    class NeuronRNGTracker(base):
        @contextlib.contextmanager
        def _distribute_region(self, spec, generator=None):
            if self._device.type != "neuron" or not self.distribute_region_enabled:
                with super()._distribute_region(spec, generator):
                    yield
                return
            index = global_index(spec)
            with super()._distribute_region(spec, generator):
                # The op draws from the device's default generator, which now holds
                # the (possibly user-passed) generator's state.
                default = _C._default_generator(self._device.index)
                _C._set_shard_index(default, index)
                try:
                    yield
                finally:
                    _C._set_shard_index(default, None)

        def _set_pre_op_offset(self, state, spec) -> None:
            # On neuron the shard's place in the stream is its elements' global indices.
            if self._device.type != "neuron":
                super()._set_pre_op_offset(state, spec)

    NeuronRNGTracker._neuron_tracker = True
    return NeuronRNGTracker


def _specialise(module) -> None:
    """Every tracker DTensor creates (``_dispatch``, ``_api``, ``manual_seed``) is
    looked up as ``module.OffsetBasedRNGTracker`` when created."""
    if not getattr(module.OffsetBasedRNGTracker, "_neuron_tracker", False):
        module.OffsetBasedRNGTracker = _neuron_tracker(module.OffsetBasedRNGTracker)


def install() -> None:
    after_import(_TARGET, _specialise)
