"""``nki.jit`` and ``nki.simulate``: launch a kernel function on the emulated NeuronCore.

Arguments are NumPy arrays or torch tensors (CPU, or ``neuron`` tensors through
zero-copy CPU aliases); the kernel sees them as HBM tensors sharing their
memory, so writes to an input are writes to the caller's tensor. Results come
back in the framework of the inputs. Every launch leaves its cost estimate in
``kernel.last_estimate`` (a projection; see ``cost.py``).
"""
from __future__ import annotations

import functools
import inspect

import numpy as np
import torch

from . import dtypes, hardware, launch
from .cost import Estimate
from .tensor import NkiTensor, from_framework


_LATEST: dict[str, Estimate] = {}


def estimates() -> dict[str, Estimate]:
    """The latest estimate of every kernel launched in this process, by kernel name (projections)."""
    return dict(_LATEST)


def _grid(spec) -> tuple[int, ...]:
    spec = spec if isinstance(spec, tuple) else (spec,)
    return tuple(int(n) for n in spec)


class Kernel:
    """A ``@nki.jit`` function; ``kernel[g0, g1](...)`` launches an SPMD grid."""

    def __init__(self, func, grid: tuple[int, ...] = (), platform_target: str | None = None, framework=None,
                 options=None):
        functools.update_wrapper(self, func)
        self.func = func
        self.grid = grid
        self.platform_target = platform_target
        self.framework = framework  # "numpy" under nki.simulate, else decided by the arguments
        self.options = options or {}
        self._estimates = {"last": None}  # shared by the kernel and its grid launchers

    @property
    def last_estimate(self) -> Estimate | None:
        """Estimated time of the most recent launch (projection), per engine."""
        return self._estimates["last"]

    def _derive(self, **changes) -> "Kernel":
        k = Kernel(self.func, changes.get("grid", self.grid), self.platform_target,
                   changes.get("framework", self.framework), self.options)
        k._estimates = self._estimates
        return k

    def __getitem__(self, grid) -> "Kernel":
        return self._derive(grid=_grid(grid))

    def __call__(self, *args, **kwargs):
        neuron_device = next((a.device for a in (*args, *kwargs.values())
                              if isinstance(a, torch.Tensor) and a.device.type == "neuron"), None)
        names = list(inspect.signature(self.func).parameters)  # errors name a tensor by its parameter
        wrapped_args = [_wrap(a, names[i] if i < len(names) else "") for i, a in enumerate(args)]
        wrapped_kwargs = {k: _wrap(v, k) for k, v in kwargs.items()}
        run = launch.KernelRun(self.__name__, self.grid, hardware.resolve_target(self.platform_target))
        with launch.running(run):
            for _ in run.programs():
                result = self.func(*wrapped_args, **wrapped_kwargs)
        self._estimates["last"] = _LATEST[self.__name__] = run.estimate()
        framework = self.framework or ("torch" if any(isinstance(a, torch.Tensor)
                                                      for a in (*args, *kwargs.values())) else "numpy")
        return _unwrap(result, framework, neuron_device)


def _wrap(value, name: str = ""):
    if isinstance(value, torch.Tensor):
        if value.device.type == "neuron":
            from ..runtime.extension import _C

            wrapped = from_framework(_C._cpu_alias(value))
            wrapped._alloc.source = value  # returning an input returns the caller's tensor itself
        elif value.device.type != "cpu":
            raise TypeError(f"NKI kernels take neuron or CPU tensors, got one on {value.device}")
        else:
            wrapped = from_framework(value)
    elif isinstance(value, np.ndarray):
        wrapped = from_framework(value)
    elif isinstance(value, (list, tuple)):
        return type(value)(_wrap(v, f"{name}[{i}]") for i, v in enumerate(value))
    else:
        return value
    wrapped._alloc.name = name
    return wrapped


def _unwrap(result, framework: str, neuron_device):
    if isinstance(result, (list, tuple)):
        return type(result)(_unwrap(r, framework, neuron_device) for r in result)
    if not isinstance(result, NkiTensor):
        return result
    value = result.as_torch()
    if framework == "numpy":
        return dtypes.tensor_as_array(value) if isinstance(value, torch.Tensor) else value
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    return value.to(neuron_device) if neuron_device is not None and value.device.type == "cpu" else value


def jit(func=None, mode="auto", platform_target=None, **options):
    """Decorator: ``@nki.jit`` or ``@nki.jit(platform_target="trn2")``."""
    if func is None:
        return lambda f: jit(f, mode=mode, platform_target=platform_target, **options)
    if isinstance(func, Kernel):
        return func
    return Kernel(func, platform_target=platform_target, options=options)


def simulate(kernel, *args, **kwargs):
    """``nki.simulate(kernel)(*numpy_args)`` -> NumPy results, as the official simulator."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    k = k._derive(framework="numpy")
    if args or kwargs:  # the older simulate_kernel(kernel, *args) form
        return k(*args, **kwargs)
    return k


simulate_kernel = simulate
