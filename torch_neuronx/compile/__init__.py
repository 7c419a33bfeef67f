"""``torch.compile(backend="neuron")``: the emulated Neuron graph compiler.

Dynamo hands each captured graph to :func:`backend.neuron_backend`, which runs
AOTAutograd on the ``neuron`` tensors and compiles every forward/backward graph
with Inductor's CPU code generation over zero-copy CPU aliases of device memory.
Only the light modules are imported here so that ``import torch`` stays fast;
Dynamo loads :mod:`.backend` through the ``torch_dynamo_backends`` entry point.
"""
from .metrics import get_dynamo_metrics, reset_dynamo_metrics  # noqa: F401
