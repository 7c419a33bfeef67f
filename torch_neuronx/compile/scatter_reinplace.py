"""The scatters of our ``index_put`` written in place by Inductor, as its own ``index_put`` is.

The AOTAutograd table of ``backend="neuron"`` writes ``index_put`` as a scatter into the
flattened tensor (compile/lowering/decompositions/index_put.py, the real product's table). A static KV cache is
updated that way on every decode step (``index_copy_`` → ``index_put`` → ``scatter``), and
Inductor 2.13 reinplaces ``index_put`` but not ``scatter``: each step then allocated a copy of
every layer's key and value cache, scattered the new token into the copy and copied it back
(30 host buffers per decode step of the benchmark's Llama against Inductor's 14 on the same
model on CPU: the compiled decode's gap per token). With ``scatter``/``scatter_add`` among Inductor's
reinplaceable ops the update is written into the cache itself, under Inductor's own rules
(only when nothing reads the old value afterwards). Only the graph run on the host changes:
the graph projected, lowered and keyed keeps the product's scatter.

Installed only around our own ``compile_fx_inner`` calls, one at a time (compile/backend.py;
``backend="inductor"`` in the same process is untouched while none runs), with its identity in
Inductor's cache key so that a graph cached without it is compiled again.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch._inductor.codegen import common
from torch._inductor.fx_passes import reinplace

from .tile2d_atomic_add import CacheKey

REINPLACE_ID = "torch_neuronx.scatter_reinplace.v1"
_aten = torch.ops.aten
_INPLACEABLE = {
    _aten.scatter.src: reinplace.InplaceableOp(_aten.scatter_.src, 0),
    _aten.scatter_add.default: reinplace.InplaceableOp(_aten.scatter_add_.default, 0),
}


@contextlib.contextmanager
def scatters_reinplaced() -> Iterator[None]:
    """Inductor's reinplacing pass also writes ``scatter``/``scatter_add`` in place, for the block."""
    common.init_backend_registration()
    saved_pass = common.custom_backend_passes.get("cpu")
    added = {op: entry for op, entry in _INPLACEABLE.items() if op not in reinplace.inplaceable_ops}
    reinplace.inplaceable_ops.update(added)
    common.custom_backend_passes["cpu"] = CacheKey(REINPLACE_ID, saved_pass)
    try:
        yield
    finally:
        common.custom_backend_passes["cpu"] = saved_pass
        for op in added:
            del reinplace.inplaceable_ops[op]
