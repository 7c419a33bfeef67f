"""``torch.compile(backend="neuron")``: the emulated Neuron graph compiler.

Dynamo hands each captured graph to :func:`backend.neuron_backend`, which runs
AOTAutograd on the ``neuron`` tensors and compiles every forward/backward graph
with Inductor's CPU code generation over zero-copy CPU aliases of device memory.
Only the light modules are imported here so that ``import torch`` stays fast;
Dynamo loads :mod:`.backend` through the ``torch_dynamo_backends`` entry point.
"""
from . import cache, flex_attention, inductor_device, kernel_lowering
from .dynamo_metrics import get_dynamo_metrics, reset_dynamo_metrics  # noqa: F401


def install(device_module) -> None:
    """Point Inductor's caches at ours and add the compile entries of ``torch.neuron``:
    the metrics (as in the real product) and Inductor's device hooks (a clear refusal);
    Inductor's entry point sends neuron graphs to the neuron backend (:mod:`.inductor_device`);
    FlexAttention on neuron passes PyTorch's device check when compiled (:mod:`.flex_attention`)."""
    cache.install()
    flex_attention.install()
    inductor_device.install()
    kernel_lowering.install()
    device_module.get_dynamo_metrics = get_dynamo_metrics
    device_module.reset_dynamo_metrics = reset_dynamo_metrics
    for name in ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen"):
        setattr(device_module, name, inductor_device.UnsupportedNeuronCodegen)
