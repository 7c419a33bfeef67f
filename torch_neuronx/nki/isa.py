"""``nki.isa``: single NeuronCore instructions, in destination-passing style.

Each instruction validates what the hardware validates (operand buffers,
partition and free sizes, engine access to PSUM), computes in fp32 as the
engines do, writes ``dst`` in its own dtype, and charges its engine.
"""
from __future__ import annotations

import enum
import math

import numpy as np

from . import dtypes as _dtypes
from . import launch as _launch
from . import ops as _ops
from .errors import NkiValidationError, NotEmulatedError  # (nki.isa.NkiValidationError in the real API)
from .errors import module_getattr as _module_getattr
from .language import _per_partition, check_bitvec, on_chip_values
from .tensor import MemoryRegion, NkiTensor


class engine(enum.Enum):  # noqa: N801  (the NKI names)
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


tensor_engine, vector_engine = engine.tensor, engine.vector
scalar_engine, gpsimd_engine, unknown_engine = engine.scalar, engine.gpsimd, engine.unknown


class reduce_cmd(enum.Enum):  # noqa: N801
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


class dge_mode(enum.Enum):  # noqa: N801
    unknown = "unknown"
    swdge = "swdge"
    hwdge = "hwdge"
    none = "none"


class oob_mode(enum.Enum):  # noqa: N801
    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):  # noqa: N801
    none = "none"
    double_row = "double_row"


class nc_version(enum.Enum):  # noqa: N801
    gen2 = "trn1"
    gen3 = "trn2"
    gen4 = "trn3"


def get_nc_version() -> nc_version:
    return nc_version(_launch.current().target)


def _require(t, api: str, role: str, *buffers: MemoryRegion) -> None:
    if not isinstance(t, NkiTensor):
        raise NkiValidationError(f"{api}: {role} must be an NKI tensor, got {type(t).__name__}")
    if t.buffer not in buffers:
        names = " or ".join(b.value.upper() for b in buffers)
        raise NkiValidationError(
            f"{api}: {role} {t!r} is in {t.buffer.value.upper()}, but this instruction takes it from {names}. "
            "Allocate it with nl.ndarray(..., buffer=nl.{}) and move data there first "
            "(nisa.dma_copy for HBM<->SBUF, nisa.tensor_copy for PSUM->SBUF).".format(buffers[0].value))


def _engine_for(api: str, requested: engine, default: str, tiles) -> str:
    chosen = default if requested in (engine.unknown, None) else requested.value
    if chosen == "gpsimd" and any(isinstance(t, NkiTensor) and t.buffer is MemoryRegion.psum for t in tiles):
        if requested is engine.gpsimd:
            raise NkiValidationError(f"{api}: GpSimd engine cannot access PSUM; use the vector or scalar engine")
        chosen = "vector"
    return chosen


def _same_partitions(api: str, dst: NkiTensor, *srcs) -> None:
    for s in srcs:
        if isinstance(s, NkiTensor) and s.shape[0] != dst.shape[0] and s.shape[0] != 1:
            raise NkiValidationError(f"{api}: {s!r} has {s.shape[0]} partitions but dst {dst!r} has "
                                     f"{dst.shape[0]}; operands must occupy the same partitions")


def _charge(engine_name: str, dst: NkiTensor, inputs: int = 1, reads_accumulator: bool = False) -> None:
    _launch.current().cost.elementwise(engine_name, _per_partition(dst.shape), inputs, reads_accumulator)


def _free_broadcast(operand, data_shape):
    """A scalar, or a ``(P, 1)`` vector broadcast along the free dimensions."""
    if np.ndim(operand) == 0:
        return operand
    return operand.reshape(operand.shape[0], *([1] * (len(data_shape) - 1)))


# -- data movement --------------------------------------------------------------
def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=engine.unknown, name=None) -> None:
    api = "nisa.dma_copy"
    hbm_or_sbuf = (MemoryRegion.sbuf, MemoryRegion.private_hbm, MemoryRegion.shared_hbm)
    _require(dst, api, "dst", *hbm_or_sbuf)
    _require(src, api, "src", *hbm_or_sbuf)
    data = src.read()
    if data.size != math.prod(dst.shape):
        raise NkiValidationError(f"{api}: src {src!r} has {data.size} elements, dst {dst!r} has "
                                 f"{math.prod(dst.shape)}; a DMA copies equal element counts")
    dst.write(data.astype(np.float32) if _dtypes.is_float(src.dtype) else data)
    _launch.current().cost.dma(data.size * max(src.itemsize, dst.itemsize))


def tensor_copy(dst, src, engine=engine.unknown, name=None, dtype=None) -> None:
    api = "nisa.tensor_copy"
    on_chip = (MemoryRegion.sbuf, MemoryRegion.psum)
    _require(dst, api, "dst", *on_chip)
    _require(src, api, "src", *on_chip)
    _same_partitions(api, dst, src)
    dst.write(src.values())
    _charge(_engine_for(api, engine, "vector", (dst, src)), dst)


def memset(dst, value, engine=engine.unknown, name=None) -> None:
    _require(dst, "nisa.memset", "dst", MemoryRegion.sbuf, MemoryRegion.psum)
    dst.write(np.full(dst.shape, value, dtype=np.float32 if _dtypes.is_float(dst.dtype) else dst.dtype))
    _charge(_engine_for("nisa.memset", engine, "vector", (dst,)), dst)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None) -> None:
    api = "nisa.iota"
    _require(dst, api, "dst", MemoryRegion.sbuf)
    steps = [int(s) for s, _ in pattern]
    counts = [int(n) for _, n in pattern]
    if math.prod(counts) != _per_partition(dst.shape):
        raise NkiValidationError(f"{api}: pattern {pattern} makes {math.prod(counts)} values per partition, "
                                 f"dst {dst!r} holds {_per_partition(dst.shape)}")
    free = np.zeros(counts, dtype=np.int64)
    for axis, step in enumerate(steps):
        shape = [1] * len(counts)
        shape[axis] = counts[axis]
        free = free + step * np.arange(counts[axis]).reshape(shape)
    channel = np.arange(dst.shape[0]).reshape(-1, 1) * channel_multiplier
    dst.write((offset + channel + free.reshape(1, -1)).astype(np.int32))
    _charge("gpsimd", dst)


# -- TensorE ----------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None) -> None:
    """``dst = stationary.T @ moving`` accumulated in PSUM (fp32)."""
    api = "nisa.nc_matmul"
    if perf_mode is not matmul_perf_mode.none:
        raise NotEmulatedError(f"{api}(perf_mode={perf_mode.name})")
    _require(stationary, api, "stationary", MemoryRegion.sbuf)
    _require(moving, api, "moving", MemoryRegion.sbuf)
    _require(dst, api, "dst", MemoryRegion.psum)
    if dst.dtype not in (np.float32, _dtypes.bfloat16):
        raise NkiValidationError(f"{api}: dst {dst!r} must be float32 (or bfloat16): TensorE accumulates in "
                                 "fp32 PSUM; cast when copying the result to SBUF (nisa.tensor_copy)")
    limits = _launch.current().limits
    k, m = stationary.shape[0], _per_partition(stationary.shape)
    k2, n = moving.shape[0], _per_partition(moving.shape)
    pmax, mmax, nmax = (int(limits[x]) for x in ("partitions", "gemm_stationary_fmax", "gemm_moving_fmax"))
    if k != k2:
        raise NkiValidationError(f"{api}: contraction sizes differ: stationary {stationary.shape} has K={k} "
                                 f"partitions, moving {moving.shape} has K={k2}. K is the partition axis of both")
    if k > pmax or m > mmax:
        raise NkiValidationError(f"{api}: stationary {stationary.shape} exceeds K x M <= {pmax} x {mmax}; "
                                 "tile K (accumulate the partial products in PSUM) and M")
    if n > nmax:
        raise NkiValidationError(f"{api}: moving {moving.shape} has free size {n} > {nmax} "
                                 "(nl.tile_size.gemm_moving_fmax); tile N and issue one matmul per tile")
    if is_transpose:
        result = stationary.values().reshape(k, m).T
    else:
        result = stationary.values().reshape(k, m).T @ moving.values().reshape(k, n)
    if math.prod(dst.shape) != result.size or dst.shape[0] != result.shape[0]:
        raise NkiValidationError(f"{api}: dst {dst!r} must be [M={m}, N={n}] for stationary "
                                 f"{stationary.shape} and moving {moving.shape}")
    result = result.reshape(dst.shape)
    if accumulate is None:  # first write to a PSUM location overwrites, later ones accumulate
        result = np.where(dst.written_mask(), dst.values() + result, result)
    elif accumulate:
        result = dst.values() + result
    dst.write(result)
    fp32 = stationary.dtype == np.float32 or moving.dtype == np.float32
    _launch.current().cost.matmul(n, fp32)


def nc_transpose(dst, data, engine=engine.unknown, name=None) -> None:
    """Swap partition and (flattened) free axes: TensorE SBUF->PSUM up to 128x128, VectorE up to 32x32."""
    api = "nisa.nc_transpose"
    p, f = data.shape[0], _per_partition(data.shape)
    use_tensor = engine is tensor_engine or (engine in (unknown_engine, None) and (p > 32 or f > 32))
    if use_tensor:
        _require(data, api, "data (TensorE)", MemoryRegion.sbuf)
        _require(dst, api, "dst (TensorE)", MemoryRegion.psum)
        limit = 128
    else:
        _require(data, api, "data", MemoryRegion.sbuf, MemoryRegion.psum)
        _require(dst, api, "dst", MemoryRegion.sbuf, MemoryRegion.psum)
        limit = 32
    if p > limit or f > limit:
        raise NkiValidationError(f"{api}: {data!r} is larger than {limit}x{limit}, the most the "
                                 f"{'tensor' if use_tensor else 'vector'} engine transposes at once")
    if dst.dtype != data.dtype:
        raise NkiValidationError(f"{api}: dst dtype {dst.dtype.name} must equal data dtype {data.dtype.name}")
    dst.write(data.values().reshape(p, f).T)
    if use_tensor:
        _launch.current().cost.matmul(p, data.dtype == np.float32)
    else:
        _charge("vector", dst)


# -- VectorE / ScalarE / GpSimd -------------------------------------------------------
def _alu(op, api: str) -> _ops.Op:
    if not isinstance(op, _ops.Op) or op.arity != 2:
        raise NkiValidationError(f"{api}: op must be an ALU operator such as nl.add or nl.maximum, got {op!r}")
    return op


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None) -> None:
    api = "nisa.tensor_tensor"
    op = _alu(op, api)
    if data1.buffer is MemoryRegion.psum and data2.buffer is MemoryRegion.psum:
        raise NkiValidationError(f"{api}: data1 and data2 cannot both be in PSUM; copy one to SBUF first")
    _same_partitions(api, dst, data1, data2)
    check_bitvec(api, op, (dst, data1, data2))
    a, b = on_chip_values(data1, api), on_chip_values(data2, api)
    with np.errstate(all="ignore"):
        dst.write(op.fn(a.reshape(dst.shape), b.reshape(dst.shape)))
    _charge(_engine_for(api, engine, op.engine, (dst, data1, data2)), dst, inputs=2)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None) -> None:
    """``(data op0 operand0) op1 operand1`` with scalar or per-partition ``(P, 1)`` operands."""
    api = "nisa.tensor_scalar"
    _same_partitions(api, dst, data)
    values = on_chip_values(data, api)
    steps = [(op0, operand0, reverse0)] + ([(op1, operand1, reverse1)] if op1 is not None else [])
    with np.errstate(all="ignore"):
        for op, operand, reverse in steps:
            op = _alu(op, api)
            check_bitvec(api, op, (dst, data))
            operand = _free_broadcast(on_chip_values(operand, api), values.shape)
            values = op.fn(operand, values) if reverse else op.fn(values, operand)
    dst.write(values)
    _charge(_engine_for(api, engine, "vector", (dst, data)), dst)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None) -> None:
    api = "nisa.tensor_reduce"
    op = _alu(op, api)
    if op.reduce is None:
        raise NkiValidationError(f"{api}: {op!r} is not a reduction operator")
    check_bitvec(api, op, (dst, data))
    axes = tuple(a % data.ndim for a in (axis if isinstance(axis, (list, tuple)) else (axis,)))
    if 0 in axes or axes != tuple(range(data.ndim - len(axes), data.ndim)):
        raise NkiValidationError(f"{api}: axis {axis} must be the last free axes of {data!r} "
                                 "(axis 0 is the partition axis)")
    _same_partitions(api, dst, data)
    out = op.reduce(on_chip_values(data, api), axis=axes)
    dst.write(-out if negate else out)
    _charge("vector", data)


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               name=None) -> None:
    """``dst = op(data * scale + bias)``; optionally add the free-axis sums into ScalarE's registers."""
    api = "nisa.activation"
    if not isinstance(op, _ops.Op) or op.arity != 1:
        raise NkiValidationError(f"{api}: op must be an activation function such as nl.exp, got {op!r}")
    _same_partitions(api, dst, data)
    values = on_chip_values(data, api)
    x = values * _free_broadcast(on_chip_values(scale, api), values.shape)
    if bias is not None:
        x = x + _free_broadcast(on_chip_values(bias, api), values.shape)
    with np.errstate(all="ignore"):
        out = op.fn(x)
    dst.write(out)
    _reduce_registers(api, out, reduce_op, reduce_res, reduce_cmd)
    _charge(_engine_for(api, engine.scalar, "scalar", (dst, data)), dst, reads_accumulator=reduce_res is not None)


def _reduce_registers(api, out, reduce_op, reduce_res, cmd) -> None:
    """ScalarE's per-partition accumulation registers, following the ``nisa.activation`` pseudo code.

    ``reset``/``reset_reduce`` zero them, ``reduce``/``reset_reduce`` add this instruction's free-axis
    sums; ``reduce_res`` reads them out. With ``idle`` they are untouched and ``reduce_res`` gets this
    instruction's own sums.
    """
    if reduce_res is None and cmd is reduce_cmd.idle:
        return
    if cmd is reduce_cmd.load_reduce:
        raise NotEmulatedError(f"{api}(reduce_cmd=load_reduce)")
    if reduce_op is not None and _alu(reduce_op, api).name != "add":
        raise NkiValidationError(f"{api}: reduce_op must be nl.add, got {reduce_op!r}")
    run = _launch.current()
    partials = out.reshape(out.shape[0], -1).sum(axis=1) if reduce_op is not None else None
    if cmd in (reduce_cmd.reset, reduce_cmd.reset_reduce) or run.accumulator is None:
        run.accumulator = np.zeros(out.shape[0], dtype=np.float32)
    if cmd in (reduce_cmd.reduce, reduce_cmd.reset_reduce) and partials is not None:
        run.accumulator = run.accumulator + partials
    if reduce_res is not None:
        result = partials if cmd is reduce_cmd.idle and partials is not None else run.accumulator
        reduce_res.write(result.reshape(reduce_res.shape))


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None) -> None:
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
               reduce_cmd=reduce_cmd.reset_reduce)


def reciprocal(dst, data, name=None) -> None:
    dst.write(1.0 / on_chip_values(data, "nisa.reciprocal"))
    _charge("vector", dst)


__getattr__ = _module_getattr("nki.isa", frozenset({
    "dma_transpose", "dma_compute", "nc_matmul_mx", "tensor_partition_reduce", "tensor_scalar_cumulative",
    "activate2", "affine_select", "local_gather", "nc_n_gather", "bn_stats", "bn_aggr", "tensor_tensor_scan",
    "nc_stream_shuffle", "rng", "dropout", "set_rng_seed", "rand_set_state", "rand_get_state", "rand2",
    "exponential", "max8", "sequence_bounds", "scalar_tensor_tensor", "tensor_scalar_reduce", "core_barrier",
    "quantize_mx", "range_select", "select_reduce", "sendrecv", "register_alloc", "register_move",
    "register_load", "register_store", "nc_find_index8", "nc_match_replace8", "nonzero_with_count", "topk",
    "tensor_copy_predicated", "get_nc_sub_version", "dma_engine", "VirtualRegister",
}))
