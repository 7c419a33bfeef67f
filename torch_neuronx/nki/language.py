"""``nki.language``: allocation, data movement, tile math, loops and SPMD indexing.

Each high-level call charges the engine the NKI compiler would pick (elementwise
arithmetic on VectorE, transcendental functions on ScalarE, loads and stores
on DMA, matmul on TensorE) to the kernel's cost estimate.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import launch as _launch
from . import ops as _ops
from .dtypes import (  # noqa: F401  (the NKI dtype names)
    bfloat16, bool_, float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float16, float32, int8,
    int16, int32, tfloat32, uint8, uint16, uint32,
)
from .errors import NkiValidationError as _ValidationError
from .errors import module_getattr as _module_getattr
from .tensor import Allocation as _Allocation
from .tensor import MemoryRegion, NkiTensor

sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
private_hbm = MemoryRegion.private_hbm
hbm = private_hbm
shared_hbm = MemoryRegion.shared_hbm


class _TileSize:
    """Hardware tile sizes of the current target (NEURON_PLATFORM_TARGET_OVERRIDE or the instance)."""

    def _limit(self, name: str) -> int:
        return int(_hardware.limits()[name])

    pmax = property(lambda self: self._limit("partitions"))
    psum_bank_fmax = property(lambda self: self._limit("psum_bank_bytes") // 4)
    psum_fmax = psum_bank_fmax
    psum_bank_fmax_bytes = property(lambda self: self._limit("psum_bank_bytes"))
    psum_num_banks = property(lambda self: self._limit("psum_banks"))
    gemm_stationary_fmax = property(lambda self: self._limit("gemm_stationary_fmax"))
    gemm_moving_fmax = property(lambda self: self._limit("gemm_moving_fmax"))
    sbuf_fmax_bytes = property(lambda self: self._limit("sbuf_bytes_per_partition"))
    total_available_sbuf_size = sbuf_fmax_bytes
    sbuf_fmax = property(lambda self: self._limit("sbuf_bytes_per_partition") // 4)
    sbuf_size_bytes = property(lambda self: self._limit("sbuf_bytes_per_partition") * self._limit("partitions"))


tile_size = _TileSize()


def is_hbm(buffer) -> bool:
    return buffer in (private_hbm, shared_hbm)


def is_on_chip(buffer) -> bool:
    return buffer in (sbuf, psum)


def is_psum(buffer) -> bool:
    return buffer is psum


def is_sbuf(buffer) -> bool:
    return buffer is sbuf


# -- allocation ---------------------------------------------------------------
def _buffer(buffer) -> MemoryRegion:
    if isinstance(buffer, MemoryRegion):
        return buffer
    if isinstance(buffer, str):
        return hbm if buffer == "hbm" else MemoryRegion(buffer)
    raise _ValidationError(f"buffer must be nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm, got {buffer!r}")


def ndarray(shape, dtype, buffer=sbuf, name="", address=None) -> NkiTensor:
    """A new tensor filled with NaN (so reads of memory never written show up)."""
    buffer = _buffer(buffer)
    shape = tuple(int(s) for s in shape)
    make = lambda: _Allocation(shape, dtype, buffer, name)  # noqa: E731
    if buffer is shared_hbm:
        return NkiTensor(_launch.current().shared_allocation(make))
    return NkiTensor(make())


def _filled(shape, value, dtype, buffer, name="") -> NkiTensor:
    t = ndarray(shape, dtype, buffer, name)
    t.write(np.full(t.shape, value, dtype=np.float32 if _dtypes.is_float(t.dtype) else t.dtype))
    if t.buffer.on_chip:
        _charge(t, 0)
    return t


def zeros(shape, dtype, buffer=sbuf, name="") -> NkiTensor:
    return _filled(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=sbuf, name="") -> NkiTensor:
    return _filled(shape, 1, dtype, buffer, name)


def full(shape, fill_value, dtype, buffer=sbuf, name="") -> NkiTensor:
    return _filled(shape, fill_value, dtype, buffer, name)


def zeros_like(x, dtype=None, buffer=None, name="") -> NkiTensor:
    return zeros(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def empty_like(x, dtype=None, buffer=None, name="") -> NkiTensor:
    return ndarray(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def shared_identity_matrix(n, dtype=uint8, dst=None) -> NkiTensor:
    dst = dst if dst is not None else ndarray((n, n), dtype, sbuf)
    dst.write(np.eye(n, dtype=np.float32))
    return dst


def par_dim(n: int) -> int:
    """Legacy marker of the partition dimension in a shape; the size itself here."""
    return n


# -- engine helpers -------------------------------------------------------------
def _per_partition(shape) -> int:
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def _charge(t: NkiTensor, inputs: int, engine: str = "vector") -> None:
    _launch.current().cost.elementwise(engine, _per_partition(t.shape), inputs)


def on_chip_values(x, api: str):
    """The fp32 values of a tile operand (or the scalar itself), checking it is on chip."""
    if not isinstance(x, NkiTensor):
        return x  # Python scalars stay weakly typed: fp32 math on float tiles, integer math on int tiles
    if not x.buffer.on_chip:
        raise _ValidationError(
            f"{api}: operand {x!r} is in {x.buffer.value}; the compute engines read only SBUF and PSUM. "
            "Copy it on chip first: nl.load(...) or nisa.dma_copy(dst=nl.ndarray(..., buffer=nl.sbuf), src=...).")
    return x.values()


def _result_dtype(args, dtype):
    if dtype is not None:
        return _dtypes.as_dtype(dtype)
    tiles = [a.dtype for a in args if isinstance(a, NkiTensor)]
    result = tiles[0]
    for d in tiles[1:]:
        result = np.result_type(result, d)
    return result


def partition_aligned(values):
    """NKI broadcasting: tiles line up on the partition axis (first), so a ``[P]`` tile is ``[P, 1]``."""
    ndim = builtins.max((np.ndim(v) for v in values), default=0)
    return [v.reshape(v.shape + (1,) * (ndim - v.ndim)) if 0 < np.ndim(v) < ndim else v for v in values]


def check_bitvec(api: str, op: _ops.Op, tiles) -> None:
    """Bit-vector operators see raw bits: the engines allow them on integer tiles only."""
    floats = [t for t in tiles if isinstance(t, NkiTensor) and _dtypes.is_float(t.dtype)]
    if op.bitvec and floats:
        raise _ValidationError(f"{api}: {op!r} is a bit-vector operator and needs integer tiles, got "
                               f"{floats[0]!r}; use nisa.tensor_copy to an integer tile first")


def _compute(api: str, op: _ops.Op, args, dtype=None, mask=None) -> NkiTensor:
    """One engine instruction; ``mask`` (legacy) limits which elements matter, all are computed here."""
    check_bitvec(f"nl.{api}", op, args)
    values = partition_aligned([on_chip_values(a, f"nl.{api}") for a in args])
    with np.errstate(all="ignore"):
        out = np.asarray(op.fn(*values))
    result = ndarray(out.shape, _result_dtype(args, dtype), sbuf)
    result.write(out)
    _charge(result, builtins.sum(isinstance(a, NkiTensor) for a in args), op.engine)
    return result


def _make_language(op: _ops.Op):
    if op.arity == 2:
        def fn(x, y, dtype=None, mask=None):
            return _compute(op.name, op, (x, y), dtype, mask)
    else:
        def fn(x, dtype=None, mask=None):
            return _compute(op.name, op, (x,), dtype, mask)
    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = f"Elementwise {op.name} into a new SBUF tile ({op.engine} engine)."
    op.language = fn
    return op


for _op in (*_ops.BINARY.values(), *_ops.UNARY.values()):
    globals()[_op.name] = _make_language(_op)
del _op


# -- reductions -----------------------------------------------------------------
def _axes(x, axis) -> tuple[int, ...]:
    axes = tuple(a % x.ndim for a in (axis if isinstance(axis, (list, tuple)) else (axis,)))
    if 0 in axes:
        raise _ValidationError(f"cannot reduce the partition dimension (axis 0) of {x!r}; reduce free axes, "
                               "or transpose first (nisa.nc_transpose) or use a matmul with a ones vector")
    return axes


def _reduce(api, fn, x, axis, dtype, keepdims):
    axes = _axes(x, axis)
    values = on_chip_values(x, f"nl.{api}")
    with np.errstate(all="ignore"):
        out = fn(values, axis=axes, keepdims=keepdims)
    result = ndarray(out.shape, _result_dtype((x,), dtype), sbuf)
    result.write(out)
    _launch.current().cost.elementwise("vector", _per_partition(x.shape))
    return result


def sum(x, axis, dtype=None, keepdims=False):  # noqa: A001
    return _reduce("sum", np.sum, x, axis, dtype, keepdims)


def max(x, axis, dtype=None, keepdims=False):  # noqa: A001
    return _reduce("max", np.max, x, axis, dtype, keepdims)


def min(x, axis, dtype=None, keepdims=False):  # noqa: A001
    return _reduce("min", np.min, x, axis, dtype, keepdims)


def mean(x, axis, dtype=None, keepdims=False):
    return _reduce("mean", np.mean, x, axis, dtype, keepdims)


def prod(x, axis, dtype=None, keepdims=False):
    return _reduce("prod", np.prod, x, axis, dtype, keepdims)


def var(x, axis, dtype=None, keepdims=False):
    return _reduce("var", np.var, x, axis, dtype, keepdims)


def all(x, axis, dtype=None):  # noqa: A001
    return _reduce("all", lambda v, axis, keepdims: np.all(v != 0, axis=axis, keepdims=keepdims)
                   .astype(np.float32), x, axis, dtype, False)


def softmax(x, axis=-1, dtype=None):
    axes = _axes(x, axis)
    v = on_chip_values(x, "nl.softmax")
    e = np.exp(v - v.max(axis=axes, keepdims=True))
    result = ndarray(v.shape, _result_dtype((x,), dtype), sbuf)
    result.write(e / e.sum(axis=axes, keepdims=True))
    for engine in ("vector", "scalar", "vector", "vector"):  # max, exp, sum, scale
        _charge(result, 1, engine)
    return result


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None):
    axes = _axes(x, axis)
    v = on_chip_values(x, "nl.rms_norm")
    weight = on_chip_values(w, "nl.rms_norm")
    rms = np.sqrt(np.square(v).sum(axis=axes, keepdims=True) / n + epsilon)
    result = ndarray(v.shape, _result_dtype((x,), dtype), sbuf)
    result.write(v / rms * weight)
    for engine in ("scalar", "vector", "vector"):  # square-sum, scale, weight
        _charge(result, 2, engine)
    return result


def where(condition, x, y, dtype=None, mask=None):
    c, a, b = partition_aligned([on_chip_values(v, "nl.where") for v in (condition, x, y)])
    out = np.where(c != 0, a, b)
    result = ndarray(out.shape, _result_dtype([a for a in (x, y) if isinstance(a, NkiTensor)] or (condition,),
                                              dtype), sbuf)
    result.write(out)
    _charge(result, 3)
    return result


def transpose(x, dtype=None):
    v = on_chip_values(x, "nl.transpose")
    result = ndarray(v.T.shape, _result_dtype((x,), dtype), sbuf)
    result.write(v.T)
    _launch.current().cost.matmul(v.shape[0], x.dtype == float32)
    return result


def expand_dims(x, axis):
    return x.reshape(np.expand_dims(np.empty(x.shape, dtype=np.bool_), axis).shape)


def broadcast_to(x, shape, dtype=None):
    v = on_chip_values(x, "nl.broadcast_to")
    result = ndarray(tuple(shape), _result_dtype((x,), dtype), sbuf)
    result.write(np.broadcast_to(v, tuple(shape)))
    _charge(result, 1)
    return result


def matmul(x, y, transpose_x=False):
    """``x @ y`` (or ``x.T @ y``) into a new fp32 PSUM tile, through nisa.nc_matmul."""
    from . import isa

    stationary = x if transpose_x else transpose(x)
    dst = ndarray((stationary.shape[1], y.shape[1]), float32, psum)
    isa.nc_matmul(dst, stationary, y)
    return dst


# -- data movement --------------------------------------------------------------
def load(src, dtype=None, mask=None) -> NkiTensor:
    """HBM -> new SBUF tile, by DMA; with a (legacy) ``mask``, masked-out elements stay unwritten (NaN)."""
    if not isinstance(src, NkiTensor) or src.buffer.on_chip:
        raise _ValidationError(f"nl.load reads from HBM; got {src!r}. For on-chip copies use nisa.tensor_copy")
    data = src.read() if mask is None else src.read_masked(mask)
    tile = ndarray(data.shape, dtype or src.dtype, sbuf)
    tile.write(data.astype(np.float32) if _dtypes.is_float(src.dtype) else data)
    count = data.size if mask is None else int(np.broadcast_to(mask, data.shape).sum())
    _launch.current().cost.dma(count * tile.itemsize)
    return tile


def store(dst, value, mask=None) -> None:
    """SBUF tile (or scalar) -> HBM, by DMA; with a (legacy) ``mask``, only where it holds."""
    if not isinstance(dst, NkiTensor) or dst.buffer.on_chip:
        raise _ValidationError(f"nl.store writes to HBM; got {dst!r}. For on-chip copies use nisa.tensor_copy")
    values = on_chip_values(value, "nl.store")
    if mask is not None:
        count = dst.write_masked(values, mask)
    else:
        dst.write(np.broadcast_to(values, dst.shape) if np.ndim(values) == 0 else values)
        count = math.prod(dst.shape)
    _launch.current().cost.dma(count * dst.itemsize)


def load_transpose2d(src, dtype=None) -> NkiTensor:
    tile = load(src, dtype)
    return transpose(tile)


def store_or_copy(dst: NkiTensor, value) -> None:
    """``tile[...] = value``: a store into HBM, an engine copy on chip."""
    if not dst.buffer.on_chip:
        store(dst, value)
        return
    values = on_chip_values(value, "tile assignment")
    dst.write(np.broadcast_to(values, dst.shape) if np.ndim(values) == 0 else values)
    _charge(dst, 1)


# -- loops and indexing ---------------------------------------------------------
def affine_range(start, stop=None, step=1):
    """Iterations without loop-carried dependencies (the compiler may reorder them); a range here."""
    return range(start, stop, step) if stop is not None else range(start)


sequential_range = static_range = dynamic_range = affine_range


def ds(start, size) -> slice:
    """``size`` elements from ``start``, as an index."""
    return slice(start, start + size)


def arange(*args) -> np.ndarray:
    """Legacy index vector: combine ``nl.arange(p)[:, None]`` and ``nl.arange(f)[None, :]``."""
    return np.arange(*args)


class _MGrid:
    """Legacy ``nl.mgrid[0:P, 0:F]``: index grids named ``.p`` and ``.x``."""

    class _Grid:
        def __init__(self, grids):
            self.p, self.x = grids[0], grids[-1]
            self.grids = grids

        def __iter__(self):
            return iter(self.grids)

    def __getitem__(self, key):
        return self._Grid(np.mgrid[key])


mgrid = _MGrid()


def fori_loop(lower, upper, body_fun, step=1):
    for i in range(lower, upper, step):
        body_fun(i)


def program_id(axis=0) -> int:
    return _launch.current().program[axis]


def num_programs(axes=None) -> int:
    grid = _launch.current().grid or (1,)
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, (list, tuple)):
        return math.prod(grid[a] for a in axes)
    return grid[axes]


def program_ndim() -> int:
    return len(_launch.current().grid)


def device_print(print_prefix, tensor) -> None:
    print(print_prefix, tensor.read() if isinstance(tensor, NkiTensor) else tensor)


__getattr__ = _module_getattr("nki.language", frozenset({
    "gather_flattened", "while_loop", "no_reorder", "random_seed", "dropout", "rand", "shared_constant",
    "average", "prelu", "bypass", "silu_dx", "gelu_dx", "gelu_apprx_sigmoid_dx", "erf_dx",
}))
