"""NKI tensors: an allocation in one buffer (HBM, SBUF, PSUM) and views of it.

A view is its allocation plus the chain of indexing steps that reached it, so
reads, writes and PSUM's "already written" mask all follow the same path.
New allocations hold NaN (integers: their largest value) so that a kernel
reading memory it never wrote sees it, as in the official simulator.
"""
from __future__ import annotations

import enum
import math
import weakref

import numpy as np
import torch

from . import dtypes, launch
from .errors import NkiValidationError, NotEmulatedError


class MemoryRegion(enum.Enum):
    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    @property
    def on_chip(self) -> bool:
        return self in (MemoryRegion.sbuf, MemoryRegion.psum)


class Allocation:
    """One buffer allocation; ``source`` is the framework tensor it wraps, if any."""

    def __init__(self, shape, dtype, buffer: MemoryRegion, name: str = "", array=None, source=None):
        shape = tuple(int(s) for s in shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.buffer = buffer
        self.name = name
        self.source = source
        self.written = None
        if array is None:
            if buffer.on_chip:
                self._check_on_chip(shape)
                array = np.full(shape, dtypes.sentinel(self.dtype), dtypes.storage_dtype(self.dtype))
            else:
                source, array = dtypes.empty_tensor(shape, dtypes.storage_dtype(self.dtype))
                array[...] = dtypes.sentinel(self.dtype)
                self.source = source
        self.array = array
        if buffer is MemoryRegion.psum:
            self.written = np.zeros(shape, dtype=bool)

    def _check_on_chip(self, shape) -> None:
        run = launch.current()
        pmax = int(run.limits["partitions"])
        what = f"{self.buffer.value} tile {self.name or ''}{list(shape)} {self.dtype.name}".replace("  ", " ")
        if not shape or shape[0] > pmax:
            raise NkiValidationError(
                f"{what}: the partition dimension (shape[0]) is {shape[0] if shape else 'missing'}, "
                f"but a NeuronCore has {pmax} partitions (nl.tile_size.pmax). Tile the first "
                f"dimension in chunks of at most {pmax} and loop over them.")
        per_partition = math.prod(shape[1:]) * self.dtype.itemsize
        if self.buffer is MemoryRegion.sbuf:
            run.charge_sbuf(per_partition, what)
            weakref.finalize(self, _release_sbuf, run, per_partition)
        else:
            banks = run.charge_psum(per_partition, what)
            weakref.finalize(self, _release_psum, run, banks)


def _release_sbuf(run, nbytes: int) -> None:
    run.sbuf_bytes -= nbytes


def _release_psum(run, banks: int) -> None:
    run.psum_banks -= banks


def _is_basic(key) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return all(isinstance(p, (int, np.integer, slice)) or p is Ellipsis or p is None for p in parts)


def _normalize(key):
    parts = key if isinstance(key, tuple) else (key,)
    out = []
    for p in parts:
        if isinstance(p, NkiTensor):
            raise NotEmulatedError("indexing a tensor with another NKI tensor",
                                   "use nisa.dma_copy with .ap(vector_offset=...) semantics")
        out.append(p)
    return tuple(out)


def _key_text(key: tuple) -> str:
    def part(p):
        if isinstance(p, slice):
            text = f"{'' if p.start is None else p.start}:{'' if p.stop is None else p.stop}"
            return text + (f":{p.step}" if p.step is not None else "")
        if p is Ellipsis:
            return "..."
        if isinstance(p, np.ndarray):
            return f"<index array {p.min()}..{p.max()}>" if p.size else "<empty index array>"
        return repr(p)
    return "[" + ", ".join(part(p) for p in key) + "]"


def _check_bounds(tensor: "NkiTensor", key: tuple) -> None:
    """Slices and integers must stay inside the tensor, as on the device: NumPy would clip a
    slice silently and the kernel would compute on fewer elements than it asked for.
    (Index arrays are checked when read: legacy kernels run them past the end with ``mask=``.)"""
    shape = tensor.shape
    dims = sum(1 for p in key if p is not None and p is not Ellipsis)
    dim = 0
    for p in key:
        if p is Ellipsis:
            dim += max(len(shape) - dims, 0)
            continue
        if p is None or dim >= len(shape):  # a new axis; too many indices is numpy's IndexError later
            continue
        n = shape[dim]
        if isinstance(p, slice):
            bad = [b for b in (p.start, p.stop) if isinstance(b, (int, np.integer)) and not -n <= b <= n]
        elif isinstance(p, (int, np.integer)):
            bad = [] if -n <= p < n else [p]
        else:
            bad = []
        if bad:
            what = f"{tensor.buffer.value} tensor" + (f" {tensor.name!r}" if tensor.name else "")
            raise NkiValidationError(
                f"out-of-bounds access {_key_text(key)} on the {what} of shape {list(shape)}: index {bad[0]} "
                f"is outside dimension {dim}, of size {n}. Index within the tensor, or pass mask= to "
                "nl.load/nl.store for a partial tile")
        dim += 1


class NkiTensor:
    """A view of an :class:`Allocation`: its dtype and buffer, and the steps from the allocation."""

    __slots__ = ("_alloc", "_path", "__weakref__")
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, alloc: Allocation, path: tuple = ()):
        self._alloc = alloc
        self._path = path

    # -- identity -----------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self._alloc.dtype

    @property
    def buffer(self) -> MemoryRegion:
        return self._alloc.buffer

    @property
    def name(self) -> str:
        return self._alloc.name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.read().shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        try:
            shape = self.shape
        except NkiValidationError:
            shape = "out of bounds"
        return f"NkiTensor(shape={shape}, dtype={self.dtype.name}, buffer={self.buffer.value})"

    # -- views --------------------------------------------------------------
    def __getitem__(self, key) -> "NkiTensor":
        key = _normalize(key)
        _check_bounds(self, key)
        return NkiTensor(self._alloc, self._path + (("key", key),))

    def __setitem__(self, key, value) -> None:
        from . import language

        language.store_or_copy(self[key], value)

    def reshape(self, shape) -> "NkiTensor":
        shape = tuple(shape)
        return NkiTensor(self._alloc, self._path + (("view", lambda a: a.reshape(shape)),))

    def permute(self, dims) -> "NkiTensor":
        dims = tuple(dims)
        return NkiTensor(self._alloc, self._path + (("view", lambda a: a.transpose(dims)),))

    def ap(self, pattern, offset=0, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """An access pattern ``[[step, count], ...]`` in elements over the whole allocation."""
        if scalar_offset is not None or vector_offset is not None or dtype is not None:
            raise NotEmulatedError("NkiTensor.ap with indirect offsets or a dtype")
        if self._path:
            raise NotEmulatedError("NkiTensor.ap on a view", "call .ap on the allocation itself")
        steps = [int(s) for s, _ in pattern]
        counts = [int(n) for _, n in pattern]

        def view(a):
            flat = a.reshape(-1)
            if offset + sum((n - 1) * s for s, n in zip(steps, counts)) >= flat.size:
                raise NkiValidationError(f"access pattern {pattern} at offset {offset} runs past the "
                                         f"end of a tensor of {flat.size} elements")
            return np.lib.stride_tricks.as_strided(
                flat[offset:], shape=counts, strides=[s * a.itemsize for s in steps])

        return NkiTensor(self._alloc, (("view", view),))

    # -- data ---------------------------------------------------------------
    def _follow(self, array: np.ndarray) -> np.ndarray:
        for kind, step in self._path:
            try:
                array = array[step] if kind == "key" else step(array)
            except IndexError as exc:
                raise NkiValidationError(
                    f"out-of-bounds access to a {self.buffer.value} tensor of shape {array.shape}: {exc}. "
                    "Index within the tensor, or pass mask= to nl.load/nl.store for a partial tile") from None
        return array

    def read(self) -> np.ndarray:
        """The elements in storage format (a view when the path allows)."""
        return self._follow(self._alloc.array)

    def values(self) -> np.ndarray:
        """The elements as an engine sees them: floats widened to fp32."""
        data = self.read()
        return data.astype(np.float32) if dtypes.is_float(self.dtype) else data

    def _target(self, array: np.ndarray):
        """(view, last key) such that ``view[last] = value`` writes through to ``array``."""
        for i, (kind, step) in enumerate(self._path):
            last = i == len(self._path) - 1
            if kind == "key" and last:
                return array, step
            if kind == "key" and not _is_basic(step):
                raise NotEmulatedError("writing through an index array followed by more indexing")
            nxt = array[step] if kind == "key" else step(array)
            if not np.shares_memory(nxt, array):
                raise NotEmulatedError("writing through a reshape that needs a copy")
            array = nxt
        return array, Ellipsis

    def write(self, values) -> None:
        view, key = self._target(self._alloc.array)
        target_shape = view[key].shape
        values = np.asarray(values)
        if values.shape != target_shape:
            if values.size != math.prod(target_shape):
                raise NkiValidationError(f"cannot write {values.shape} elements into a {self.buffer.value} "
                                         f"tile of shape {target_shape}")
            values = values.reshape(target_shape)
        if not dtypes.is_float(self.dtype) and np.issubdtype(values.dtype, np.floating):
            values = np.nan_to_num(values)
        view[key] = values
        if self._alloc.written is not None:
            mask_view, mask_key = self._target(self._alloc.written)
            mask_view[mask_key] = True

    def _masked_key(self, mask):
        """(base array, index arrays clipped into range, mask broadcast to the indexed shape).

        Legacy kernels index with ``nl.arange`` grids that may run past the
        tensor's end and pass ``mask=`` to say which elements are real.
        """
        kind, key = self._path[-1] if self._path else (None, None)
        if kind != "key" or not all(isinstance(k, (np.ndarray, int, np.integer)) for k in key):
            raise NotEmulatedError("mask= on a view not built from nl.arange index grids")
        base = NkiTensor(self._alloc, self._path[:-1]).read()
        if len(key) != base.ndim:
            raise NotEmulatedError("mask= with fewer index grids than tensor dimensions")
        grids = np.broadcast_arrays(*[np.asarray(k) for k in key])
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), grids[0].shape)
        clipped = tuple(np.clip(g, 0, n - 1) for g, n in zip(grids, base.shape))
        return base, clipped, mask

    def read_masked(self, mask) -> np.ndarray:
        base, clipped, mask = self._masked_key(mask)
        data = base[clipped].astype(np.float32) if dtypes.is_float(self.dtype) else base[clipped]
        return np.where(mask, data, dtypes.sentinel(self.dtype))

    def write_masked(self, values, mask) -> None:
        if self._alloc.written is not None:
            raise NotEmulatedError("mask= on a PSUM tensor")
        base, clipped, mask = self._masked_key(mask)
        if not np.shares_memory(base, self._alloc.array):
            raise NotEmulatedError("writing through a reshape that needs a copy")
        values = np.broadcast_to(values, mask.shape)
        base[tuple(g[mask] for g in clipped)] = values[mask]
        return int(mask.sum())

    def broadcast_to(self, shape) -> "NkiTensor":
        from . import language

        return language.broadcast_to(self, shape)

    def written_mask(self) -> np.ndarray:
        return self._follow(self._alloc.written)

    def as_torch(self) -> torch.Tensor:
        """The framework tensor behind an HBM allocation (the input itself when it was one)."""
        if self._path or self._alloc.source is None:
            raise TypeError("a kernel returns whole HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm) "
                            f"or an input); got {self!r} built by indexing or on chip")
        return self._alloc.source

    # -- operators (tile arithmetic of the NKI language) ----------------------
    def _binary(name, reverse=False):
        def op(self, other):
            from . import language

            fn = getattr(language, name)
            return fn(other, self) if reverse else fn(self, other)
        op.__name__ = name
        return op

    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("subtract"), _binary("subtract", True)
    __mul__, __rmul__ = _binary("multiply"), _binary("multiply", True)
    __truediv__, __rtruediv__ = _binary("divide"), _binary("divide", True)
    __pow__ = _binary("power")
    __lt__, __le__ = _binary("less"), _binary("less_equal")
    __gt__, __ge__ = _binary("greater"), _binary("greater_equal")
    __and__, __or__, __xor__ = _binary("bitwise_and"), _binary("bitwise_or"), _binary("bitwise_xor")
    del _binary

    def __neg__(self):
        from . import language

        return language.negative(self)

    def __bool__(self):
        raise TypeError("the truth value of an NKI tile is decided on the device; compare with nl.equal "
                        "and use nl.where, or bring the value to the host with nisa.register_load")


def from_framework(value, buffer: MemoryRegion = MemoryRegion.shared_hbm) -> NkiTensor:
    """Wrap a NumPy array or CPU torch tensor as an HBM tensor sharing its memory."""
    if isinstance(value, torch.Tensor):
        return NkiTensor(Allocation(value.shape, dtypes.as_dtype(value.dtype), buffer,
                                    array=dtypes.tensor_as_array(value), source=value))
    array = np.asarray(value)
    return NkiTensor(Allocation(array.shape, array.dtype, buffer, array=array, source=array))
