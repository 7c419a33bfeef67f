"""TorchTitan on CPU with gloo: the reference losses for the same job on ``neuron``.

    torchrun --nproc_per_node N examples/torchtitan/cpu_reference.py --module llama3 \\
        --config llama3_debugmodel [TorchTitan's flags]

takes ``python -m torchtitan.train``'s arguments unchanged. TorchTitan 0.3.0 does not train on
CPU as shipped; this launcher changes, in its own process only:

- no neuron backend: ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` before ``import torch``;
- the device: TorchTitan takes ``torch._utils._get_available_device_type() or "cuda"``; here
  ``"cpu"`` (and so gloo, c10d's backend for it), and ``torch.cpu`` gets the device-module calls
  TorchTitan makes that it lacks (CPU has no device memory: the memory figures read 0);
- FlexAttention (TorchTitan's only attention for language models): PyTorch 2.13 refuses its
  backward on CPU and Inductor's CPU template has none, so every ``torch.compile``'d function
  runs eagerly (``torch.compiler.set_stance("force_eager")``) and PyTorch's own eager
  FlexAttention (the op's dense implementation and its backward) is let through on CPU: the
  math the neuron compiler decomposes FlexAttention into;
- FSDP2's gradient reduction: gloo has neither ``AVG`` nor ``PREMUL_SUM``, which FSDP2 uses, so
  it reduces with ``SUM`` and divides itself (FSDP2's own ``force_sum_reduction_for_comms`` path);
  the neuron group runs the two ops as SUM and a scale as well (docs/distributed.md);
- ``torch.distributed.set_timeout`` (PyTorch 2.14, called after the first step) from the
  group's own ``set_timeout``.

Start it in the directory ``workspace.py`` prepared, as TorchTitan itself (docs/torchtitan.md).
"""
from __future__ import annotations

import os

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import runpy  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def _cpu_device_module() -> None:
    """What TorchTitan calls on its device module that ``torch.cpu`` lacks."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    properties = types.SimpleNamespace(name="cpu", total_memory=total)
    additions = {
        "current_device": lambda: 0,
        "get_device_name": lambda device=None: "cpu",
        "get_device_properties": lambda device=None: properties,
        "memory_stats": lambda device=None: {},
        "reset_peak_memory_stats": lambda device=None: None,
        "empty_cache": lambda: None,
    }
    for name, function in additions.items():
        setattr(torch.cpu, name, function)
    torch._utils._get_available_device_type = lambda: "cpu"


def _eager_flex_attention_on_cpu() -> None:
    from torch.nn.attention import flex_attention as module

    validate_device = module._validate_device

    def validate_device_with_cpu_backward(query, key, value):
        if query.device.type != "cpu":
            validate_device(query, key, value)

    module._validate_device = validate_device_with_cpu_backward
    torch.compiler.set_stance("force_eager")


def _fsdp_sum_reduction() -> None:
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as module

    divide_factors = module._get_gradient_divide_factors

    def divide_factors_for_gloo(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type="",
                                factor=None, force_sum_reduction_for_comms=False):
        return divide_factors(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type, factor,
                              True)

    module._get_gradient_divide_factors = divide_factors_for_gloo


def _set_timeout() -> None:
    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = lambda timeout, group=None: (group or dist.group.WORLD).set_timeout(timeout)


def main() -> None:
    _cpu_device_module()
    _eager_flex_attention_on_cpu()
    _fsdp_sum_reduction()
    _set_timeout()
    sys.argv[0] = "torchtitan.train"
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
