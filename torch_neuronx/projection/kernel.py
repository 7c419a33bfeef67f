"""One kernel on one logical NeuronCore: its engine, work, bytes and roofline time.

FLOPs come from PyTorch's own formulas (``torch.utils.flop_counter.flop_registry``);
bytes are counted as ``torch.utils._runtime_estimation.get_num_bytes`` counts
them (broadcast dimensions read once), the roofline
``torch.distributed._tools.runtime_estimator`` uses. That module is not
imported: it pulls in Inductor, about 4 s, too slow for the eager path. What
this module adds is Trainium's engine split. The op → engine mapping (docs/projection.md):

- TensorE: every op with a PyTorch FLOP formula (matmuls, convolutions,
  attention), at the rate of its operands' dtype; its result lands in PSUM and leaves it through
  ScalarE (below);
- ScalarE: transcendentals and activation functions (``SCALAR_OPS``);
- VectorE and ScalarE together: a softmax (``SOFTMAX_OPS``) is three VectorE passes over its input
  (the row max, the row sum, the division) around ScalarE's ``exp``, which takes the max as its
  bias; it is charged as the three VectorE passes, the busier engine;
- GpSimd: sorting, scans, scatter-accumulate and random numbers (``GPSIMD_OPS``);
- DMA: copies, concatenation, gathers and indexing (``DMA_OPS``, ``*_copy``); an in-place indexed
  write (``INDEXED_WRITES``: a KV-cache update) moves only its values, not its destination, and a
  gather (``GATHERS``: an embedding lookup) only the rows it selects;
- VectorE: every other op (arithmetic, comparisons, reductions, norms);
- none: views and allocations, which launch no kernel.

VectorE, ScalarE and GpSimd stream 128 elements per engine cycle (trn2 and trn3 VectorE: 256), the
NKI architecture guides' data-path widths (``hardware.json``); a VectorE op reading two full-size
tensors takes two cycles per element ("roughly 2N cycles"). A TensorE op's ``elements`` are the
ScalarE work beside it, which a compiled graph charges to ScalarE: every result element leaves
PSUM through a compute engine ("nl.matmul writes its result to PSUM; nl.copy brings it to SBUF",
``nki.language.copy``), and the compiler evacuates with ScalarE's ``activation``, which applies a
following scale, bias or activation on the way; a fused attention kernel also exponentiates every
score there (one ``exp`` per score, recomputed in the backward; the exp reads the scores from PSUM,
which is their evacuation).

What a compiled graph makes of a copy (``COPY_OPS``) is decided here too, once
(:func:`in_graph`): a graph has values, not buffers, so a copy that keeps its dtype
is nothing there and one that changes it is a ``convert``.
"""
from __future__ import annotations

import dataclasses
from math import prod

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import flop_registry

from .calibration import Calibration
from .hardware import DeviceModel, tensor_dtype_class

aten = torch.ops.aten

# CPU's fused attention kernels (what SDPA runs on the emulated device) count
# as the flash kernels PyTorch has formulas for: same arguments, same work.
_FLOP_ALIASES = {
    name: flop_registry[packet] for name, packet in (
        ("_scaled_dot_product_flash_attention_for_cpu", aten._scaled_dot_product_flash_attention),
        ("_scaled_dot_product_flash_attention_for_cpu_backward",
         aten._scaled_dot_product_flash_attention_backward),
        ("_scaled_dot_product_fused_attention_overrideable", aten._scaled_dot_product_flash_attention),
        ("_scaled_dot_product_fused_attention_overrideable_backward",
         aten._scaled_dot_product_flash_attention_backward),
    )
}

SCALAR_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "tanh_backward", "sigmoid",
    "sigmoid_backward", "logit", "erf", "erfc", "erfinv", "rsqrt", "sqrt", "pow", "sin", "cos", "tan",
    "asin", "acos", "atan", "atan2", "sinh", "cosh", "gelu", "gelu_backward", "silu", "silu_backward",
    "mish", "mish_backward", "softplus", "softplus_backward", "elu", "elu_backward", "selu", "celu",
    "hardswish", "hardsigmoid", "_softmax_backward_data",
    "_log_softmax_backward_data", "logsumexp", "log_sigmoid_forward",
    "log_sigmoid_backward",
})
SOFTMAX_OPS = frozenset({"_softmax", "_log_softmax", "_safe_softmax"})
SOFTMAX_VECTOR_PASSES = 3  # row max, row sum, division (exp with the max as its bias: ScalarE)
GPSIMD_OPS = frozenset({
    "sort", "topk", "argsort", "cumsum", "cumprod", "cummax", "cummin", "nonzero", "_unique2",
    "unique_consecutive", "scatter_add", "scatter_reduce", "index_add", "index_put", "_index_put_impl",
    "embedding_dense_backward", "bernoulli", "uniform", "normal", "random", "randperm", "multinomial",
    "native_dropout", "arange", "linspace", "bincount", "histc", "searchsorted",
})
# ops whose result is one input's values, in place or in a new buffer, in the output's dtype
COPY_OPS = frozenset({"copy", "_to_copy", "_copy_from", "_copy_from_and_resize", "clone", "contiguous"})
DMA_OPS = COPY_OPS | frozenset({
    "cat", "stack", "index_select",
    "gather", "embedding", "index", "_unsafe_index", "scatter", "slice_scatter", "select_scatter",
    "as_strided_scatter", "diagonal_scatter", "constant_pad_nd", "repeat", "roll", "flip", "tril",
    "triu", "masked_select", "take", "_local_scalar_dense",
})
# in place, these write only the positions their index names (a KV-cache update writes one token):
# they move their values and indices, read once and written once, not the whole destination
INDEXED_WRITES = frozenset({"index_copy", "index_put", "_index_put_impl", "index_add", "index_fill",
                            "scatter", "scatter_add", "scatter_reduce", "masked_scatter"})
# gathers read only the rows they select (an embedding lookup reads a few rows of its table)
GATHERS = frozenset({"embedding", "index_select", "gather", "take"})
NO_KERNEL_OPS = frozenset({
    "empty", "empty_strided", "empty_like", "resize", "_resize_output", "set", "lift_fresh",
    "detach", "alias", "_reshape_alias", "_unsafe_view", "view", "as_strided",
    "_has_compatible_shallow_copy_type", "is_pinned", "record_stream",
})


class ProjectionError(ValueError):
    """An op name or argument list the projection cannot interpret."""


def resolve_op(op: str):
    """``"aten::mm"`` or ``"aten::add.Tensor"`` → the OpOverload (or the packet
    when no overload is named and the op has no ``default`` overload)."""
    namespace, sep, rest = op.partition("::")
    if not sep or not rest:
        raise ProjectionError(f"op {op!r} is not a qualified name such as 'aten::mm' or 'aten::add.Tensor'")
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        if overload:
            return getattr(packet, overload)
        return packet.default if "default" in packet.overloads() else packet
    except (AttributeError, RuntimeError):
        raise ProjectionError(f"op {op!r} is not a registered operator") from None


def _packet(fn):
    return getattr(fn, "overloadpacket", fn)


def base_name(fn) -> str:
    """The op's name without namespace, overload or in-place underscore (``add_`` → ``add``)."""
    name = _packet(fn).__name__
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def flop_formula(fn):
    packet = _packet(fn)
    return flop_registry.get(packet) or _FLOP_ALIASES.get(getattr(packet, "__name__", ""))


def tensor_engine_ops() -> frozenset[str]:
    """Qualified names (``aten::mm``) of the ops TensorE runs: those with a FLOP formula."""
    names = {getattr(p, "_qualified_op_name", "") for p in flop_registry}
    return frozenset({n for n in names if n.startswith("aten::")} | {f"aten::{n}" for n in _FLOP_ALIASES})


def engine_of(fn) -> str:
    """Which engine runs ``fn`` (see the module docstring); ``none`` for views/allocations."""
    if flop_formula(fn) is not None:
        return "tensor"
    name = base_name(fn)
    if name in NO_KERNEL_OPS:
        return "none"
    if name in DMA_OPS or name.endswith("_copy"):  # ``contiguous`` aliases in its schema, but as a
        return "dma"  # kernel (the device's copy of a strided input) it moves the tensor
    if getattr(fn, "is_view", False):
        return "none"
    if name in SCALAR_OPS:
        return "scalar"
    if name in GPSIMD_OPS:
        return "gpsimd"
    return "vector"


def in_graph(fn, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> str:
    """What a compiled graph makes of a call: ``"identity"`` for a copy (``COPY_OPS``) that keeps
    its dtype (a graph has no strides and one device: torch-mlir lowers ``clone``, ``contiguous``
    and a same-dtype ``_to_copy`` to nothing), ``"convert"`` for a copy that changes it (a
    ``stablehlo.convert``: it reads one dtype and writes the other, in HBM unless fused), ``"op"``
    for any other call. The eager device launches no kernel for either kind of copy
    (``device_dispatch``); a graph's work counts the converts (``job.graph_work``)."""
    if base_name(fn) not in COPY_OPS or not outputs:
        return "op"
    return "convert" if any(t.dtype != outputs[0].dtype for t in inputs) else "identity"


def _key_meta(x):
    """A dense meta tensor of ``x``'s shape and dtype: all a kernel key holds of a tensor. A call's
    cost must not depend on strides the key does not see (a key keeps its first projection, and
    one key meets dense and expanded inputs alike); on the device a strided input is made
    contiguous by a kernel of its own before the op reads it (``device_dispatch.kernels_of``)."""
    if isinstance(x, torch.Tensor):
        return torch.empty(x.shape, dtype=x.dtype, device="meta")
    return x


def _split_args(fn, args: tuple) -> tuple[tuple, dict]:
    """A boxed argument list (every schema argument in order) → positional and keyword-only."""
    schema = getattr(fn, "_schema", None)
    if schema is None:
        return tuple(args), {}
    positional = [a for a in schema.arguments if not a.kwarg_only]
    keyword = [a for a in schema.arguments if a.kwarg_only]
    if len(args) > len(positional) + len(keyword):
        raise ProjectionError(f"{schema.name} takes {len(schema.arguments)} arguments, got {len(args)}")
    n = min(len(args), len(positional))
    return tuple(args[:n]), {a.name: v for a, v in zip(keyword, args[n:])}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches in ``t``: a stride-0 (broadcast) dimension is read once."""
    return prod(int(size) for size, stride in zip(t.shape, t.stride()) if stride != 0) * t.element_size()


def tensors_in(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


@dataclasses.dataclass(frozen=True)
class KernelCost:
    """The projected cost of one call of one kernel signature (no launch overhead)."""

    op: str
    engine: str
    flops: int  # TensorE FLOPs by PyTorch's formula; 0 on other engines
    elements: int  # element operations on VectorE/ScalarE/GpSimd (a two-input VectorE op counts its elements
    # twice, a softmax three times); on TensorE, the ScalarE elements beside it: its results leaving PSUM,
    # and the scores a fused attention kernel exponentiates
    bytes: int  # inputs read + outputs written (HBM traffic without on-chip reuse)
    compute_seconds: float
    memory_seconds: float
    outputs_known: bool  # False when the op could not be run on meta tensors
    first_shape: tuple[int, ...] = ()  # the first tensor argument's shape (the plan's sequence-parallel split)
    largest_bytes: int = 0  # its largest input or output: whether a compiled graph can keep it on chip (SBUF)
    graph_identity: bool = False  # a copy that keeps its dtype: nothing in a compiled graph (``in_graph``)
    scalar_seconds: float = 0.0  # on TensorE: its ``elements`` on ScalarE beside it, which a compiled graph charges

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        if self.engine == "none":
            return "none"
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"


# Matmuls whose first two tensors are the operands, the rest scales: row-wise FP32 scales are
# 2-D, yet the FP8 operands set TensorE's rate.
SCALED_MATMUL_OPS = frozenset({"_scaled_mm", "_scaled_mm_v2", "_scaled_grouped_mm"})


# The rate class FP32 operands run at under the compiler's --auto-cast (set by numerics/precision.py
# from NEURON_CC_FLAGS): TensorE multiplies them in the auto-cast type. None: FP32, the default.
_auto_cast_class: list[str | None] = [None]


def set_auto_cast_class(dtype_class: str | None) -> None:
    _auto_cast_class[0] = dtype_class


def _tensor_rate(device: DeviceModel, inputs: list[torch.Tensor]) -> float:
    """TensorE peak for the operands (2-D and up; biases and scales don't set the rate):
    the slowest dtype class among them, FP32 counted as the auto-cast type when one is set."""
    operands = [t for t in inputs if t.dim() >= 2] or inputs
    classes = [tensor_dtype_class(t.dtype) for t in operands]
    return min(device.tensor_flops[_auto_cast_class[0] if c == "fp32" and _auto_cast_class[0] else c]
               for c in classes)


def _attention_scores(fn, inputs: list[torch.Tensor]) -> int:
    """The scores a fused attention kernel exponentiates on ScalarE: batch × query heads × query
    length × key length (the backward's arguments start with the output's gradient); 0 for any
    other TensorE op."""
    if "attention" not in base_name(fn):
        return 0
    query, key = inputs[1:3] if base_name(fn).endswith("_backward") else inputs[:2]
    return prod(query.shape[:-1]) * key.shape[-2]


def work(fn, args: tuple, kwargs: dict, out, outputs_known: bool = True) -> tuple[str, int, int, int]:
    """(engine, flops, elements, bytes) of one call; ``args``/``out`` are meta tensors.
    Without outputs, a FLOP formula that needs them counts 0 FLOPs."""
    engine = engine_of(fn)
    inputs, outputs = tensors_in((args, kwargs)), tensors_in(out)
    if engine == "none":
        return engine, 0, 0, 0
    if base_name(fn) in INDEXED_WRITES and _packet(fn).__name__.endswith("_") and len(inputs) > 1:
        nbytes = 2 * sum(tensor_bytes(t) for t in inputs[1:])
    elif base_name(fn) in GATHERS and outputs:
        nbytes = 2 * sum(tensor_bytes(t) for t in outputs) + sum(tensor_bytes(t) for t in inputs[1:])
    else:
        nbytes = sum(tensor_bytes(t) for t in inputs) + sum(tensor_bytes(t) for t in outputs)
    if engine == "tensor":
        try:
            flops = int(flop_formula(fn)(*args, **kwargs, out_val=out))
        except Exception:
            if outputs_known:
                raise
            flops = 0
        return engine, flops, _attention_scores(fn, inputs) + sum(prod(t.shape) for t in outputs), nbytes
    elements = max((prod(t.shape) for t in inputs + outputs), default=0)
    if engine == "vector" and sum(prod(t.shape) == elements for t in inputs) >= 2:
        elements *= 2  # two full-size input tiles: "roughly 2N cycles" (NKI architecture guide, VectorE)
    if base_name(fn) in SOFTMAX_OPS:
        elements *= SOFTMAX_VECTOR_PASSES
    return engine, 0, elements, nbytes


def roofline(op: str, engine: str, flops: int, elements: int, nbytes: int, rate_inputs: list[torch.Tensor],
             device: DeviceModel, cal: Calibration, outputs_known: bool = True) -> KernelCost:
    """``max(compute, memory)`` under the calibration's efficiency factors; a per-op
    override is looked up by the exact name, then without the overload (``aten::add``)."""
    override = cal.op_override(op)
    engine = override.get("engine", engine)
    if engine == "none":
        return KernelCost(op, engine, 0, 0, 0, 0.0, 0.0, outputs_known)
    scalar = 0.0
    if engine == "tensor":
        eff = override.get("efficiency", cal.efficiency["tensor"])
        compute = flops / (_tensor_rate(device, rate_inputs) * eff) if flops else 0.0
        scalar = elements / (device.engine_elements_per_s["scalar"] * cal.efficiency["scalar"])
    elif engine == "dma":
        compute = 0.0
    else:
        eff = override.get("efficiency", cal.efficiency[engine])
        compute = elements / (device.engine_elements_per_s[engine] * eff)
    if engine == "dma":  # HBM to HBM through the DMA queues: the slower of the two
        bandwidth = min(device.dma_bytes_per_s * override.get("efficiency", cal.efficiency["dma"]),
                        device.hbm_bytes_per_s * cal.efficiency["hbm"])
    else:
        bandwidth = device.hbm_bytes_per_s * cal.efficiency["hbm"]
    return KernelCost(op, engine, flops, elements, nbytes, compute, nbytes / bandwidth, outputs_known,
                      scalar_seconds=scalar)


def project_call(op: str, args: tuple, device: DeviceModel, cal: Calibration) -> KernelCost:
    """Project one call of ``op`` with the boxed argument list ``args`` (tensors
    may live on any device: only their shapes and dtypes are used, on dense meta copies)."""
    fn = resolve_op(op)
    margs, mkwargs = _split_args(fn, tree_map(_key_meta, tuple(args)))
    inputs = tensors_in((margs, mkwargs))
    try:
        out = fn(*margs, **mkwargs)
        known = True
    except Exception:  # no meta kernel, or a data-dependent output shape: inputs only
        out, known = None, False
    engine, flops, elements, nbytes = work(fn, margs, mkwargs, out, known)
    rate_inputs = inputs[:2] if base_name(fn) in SCALED_MATMUL_OPS else inputs
    cost = roofline(op, engine, flops, elements, nbytes, rate_inputs, device, cal, known)
    outputs = tensors_in(out)
    return dataclasses.replace(cost, first_shape=tuple(inputs[0].shape) if inputs else (),
                               largest_bytes=max((tensor_bytes(t) for t in inputs + outputs), default=0),
                               graph_identity=in_graph(fn, inputs, outputs) == "identity")
