"""Inductor's CPU code for an accumulating store in a 2-D tiled loop, corrected for our graphs.

PyTorch 2.13's ``CppTile2DKernel.store`` rewrites a store's index for the tile
(outer loop variable ``x`` → ``x + x_inner``) and hands an atomic add (``index_put``
with ``accumulate=True``, ``scatter_add``, ``index_add`` lower to one) to
``CppVecKernel.store``, whose atomic path builds the lane indices with
``ops.index_expr`` — which in a tile kernel applies the same rewrite again
(``x + 2*x_inner``). The adds land on the wrong elements or outside the buffer.
A tile kernel is chosen when a fused input is read transposed: Falcon's
multi-query attention picks its key and value heads with a list index
(``fused_qkv[..., [-2], :]``), whose backward accumulates the bmm's transposed
key gradient into the fused projection's gradient, so every Falcon training
step compiled by Inductor had wrong gradients (upstream bug; the minimal
reproduction is in tests/compile/test_inductor_tile2d_atomic_add.py). Our backend now
decomposes that ``index_put`` into ``scatter_add`` (``lowering/decompositions/index_put.py``), which
Inductor hands to ATen on a multi-threaded CPU; an embedding's backward still
reaches the store (``_unsafe_masked_index_put_accumulate``), tiled when the
embedding's output gradient is read both transposed and not.

Our backend compiles with a CPU scheduling whose tile kernel passes the atomic
add its index untransformed (``ops.index_expr`` transforms it once); everything
else, vectorization included, is Inductor's own. It is installed only around our
own ``compile_fx_inner`` calls, one at a time (compile/backend.py), so
``backend="inductor"`` in the same process is untouched while none runs, and it
adds a pass identity to Inductor's cache key so a graph cached with the wrong
code is never reused.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from torch._inductor import config as inductor_config
from torch._inductor.codegen import common
from torch._inductor.codegen.cpp import CppKernelProxy, CppScheduling, CppTile2DKernel, CppVecKernel
from torch._inductor.custom_graph_pass import CustomGraphModulePass

FIX_ID = "torch_neuronx.tile2d_atomic_add.v1"


class _Tile2DKernel(CppTile2DKernel):
    def store(self, name, index, value, mode=None):
        if mode == "atomic_add" and self._atomic_add_builds_lane_indices(index):
            # CppVecKernel's atomic path transforms the index itself, through index_expr.
            return CppVecKernel.store(self, name, index, value, mode)
        return super().store(name, index, value, mode)

    def _atomic_add_builds_lane_indices(self, index) -> bool:
        """True where CppVecKernel.store emits ``atomic_add_vec`` (not a transposed tile store,
        not the single-thread plain store, which use the index as given)."""
        single_thread = not inductor_config.cpp.dynamic_threads and self.num_threads == 1
        return not single_thread and not self.need_vec_transpose(self.rename_indexing(index))


class _KernelProxy(CppKernelProxy):
    tile2d_kernel_cls = _Tile2DKernel


class _Scheduling(CppScheduling):
    kernel_proxy_cls = _KernelProxy


class CacheKey(CustomGraphModulePass):
    """Puts a change of ours (``identity``) in Inductor's FX-graph cache key as the CPU device
    pass; runs the CPU pass it stands in for, if any."""

    def __init__(self, identity: str, previous: common.CustomGraphModulePass | None):
        self.identity = identity
        self.previous = previous

    def __call__(self, gm) -> None:
        if self.previous is not None:
            self.previous(gm)

    def uuid(self):
        return (self.identity, self.previous.uuid() if self.previous is not None else None)


@contextlib.contextmanager
def corrected_cpu_codegen() -> Iterator[None]:
    """Inductor's CPU code generation with the tile kernel's atomic add corrected, for the block."""
    common.init_backend_registration()
    saved = common.device_codegens["cpu"]
    saved_pass = common.custom_backend_passes.get("cpu")
    saved_config = common.custom_backend_codegen_configs.get("cpu")

    def scheduling(scheduler):
        return _Scheduling(scheduler) if inductor_config.cpu_backend == "cpp" else saved.scheduling(scheduler)

    common.register_backend_for_device(
        "cpu", scheduling, saved.wrapper_codegen, saved.cpp_wrapper_codegen, saved.fx_wrapper_codegen,
        device_custom_pass=CacheKey(FIX_ID, saved_pass), device_custom_config=saved_config,
    )
    try:
        yield
    finally:
        common.device_codegens["cpu"] = saved
        common.custom_backend_passes["cpu"] = saved_pass
        common.custom_backend_codegen_configs["cpu"] = saved_config
