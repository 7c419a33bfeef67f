"""A clear error for applying FSDP2 to parameters that are already sharded.

In a TP×FSDP layout FSDP is applied once; re-applying it to a pre-sharded model is a mistake.
PyTorch's own failure for that is an internal one (``Cannot concatenate
overlapping meshes`` from deep inside ``FSDPParam``). ``fully_shard`` is
wrapped, once its module is first imported, so the mistake is reported in
the user's terms: which parameter, which mesh dimension, what to do instead.
The wrapper keeps ``fully_shard``'s attributes (``fully_shard.state``).
Importing FSDP is not forced at ``import torch``: the wrap happens lazily.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys

_TARGET = "torch.distributed.fsdp._fully_shard._fully_shard"


def _overlap(fsdp_mesh, param_mesh) -> list[tuple[str, int]]:
    """Dimensions of ``param_mesh`` that ``fsdp_mesh`` would shard over again,
    as (label, index in ``param_mesh``)."""
    if fsdp_mesh.device_type != param_mesh.device_type:
        return []
    names = param_mesh.mesh_dim_names
    if fsdp_mesh.mesh_dim_names and names:
        return [(n, names.index(n)) for n in fsdp_mesh.mesh_dim_names if n in names]
    if fsdp_mesh.mesh.shape == param_mesh.mesh.shape and bool(
            (fsdp_mesh.mesh == param_mesh.mesh).all()):
        return [(names[i] if names else f"dim {i}", i) for i in range(param_mesh.ndim)]
    return []


def _unmanaged_parameters(module, prefix=""):
    """Parameters this ``fully_shard`` call would manage: nested FSDP modules'
    parameters belong to those modules and are skipped, as FSDP2 does."""
    from torch.distributed.fsdp import FSDPModule

    for name, param in module.named_parameters(prefix=prefix, recurse=False):
        yield name, param
    for name, child in module.named_children():
        if not isinstance(child, FSDPModule):
            yield from _unmanaged_parameters(child, f"{prefix}.{name}" if prefix else name)


def check_not_presharded(module, mesh) -> None:
    """Raise ValueError if a parameter of ``module`` is already sharded over ``mesh``."""
    from torch.distributed.tensor import DTensor, Shard

    if mesh is None:
        return
    for name, param in _unmanaged_parameters(module):
        if not isinstance(param, DTensor):
            continue
        pmesh = param.device_mesh
        for dim, idx in _overlap(mesh, pmesh):
            if isinstance(param.placements[idx], Shard):
                raise ValueError(
                    f"fully_shard: parameter {name!r} of {type(module).__name__} is already "
                    f"sharded on mesh dimension {dim!r} (placements {param.placements} over "
                    f"{pmesh}). Don't re-apply FSDP to a pre-sharded model: apply fully_shard "
                    "once per module (inner blocks first, then the root), and use a mesh "
                    "dimension the parameters are not sharded on."
                )


def _guarded(fully_shard):
    @functools.wraps(fully_shard)
    def wrapper(module, *args, **kwargs):
        mesh = kwargs.get("mesh")
        modules = module if isinstance(module, (list, tuple)) else [module]
        for m in modules:
            check_not_presharded(m, mesh)
        return fully_shard(module, *args, **kwargs)

    return wrapper


_REEXPORTS = ("torch.distributed.fsdp._fully_shard", "torch.distributed.fsdp")


def _wrap(module) -> None:
    """Wrap ``module.fully_shard`` and any re-export already bound to the original."""
    original = module.fully_shard
    if getattr(original, "_neuron_guarded", False):
        return
    guarded = _guarded(original)
    guarded._neuron_guarded = True
    module.fully_shard = guarded
    for name in _REEXPORTS:
        package = sys.modules.get(name)
        if package is not None and getattr(package, "fully_shard", None) is original:
            package.fully_shard = guarded


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds FSDP2's module once, through the normal finders, and wraps it after it runs."""

    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _wrap(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if _TARGET in sys.modules:
        _wrap(sys.modules[_TARGET])
    elif not any(isinstance(f, _WrapOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())
