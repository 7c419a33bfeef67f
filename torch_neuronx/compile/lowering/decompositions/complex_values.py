"""Complex values of a graph to lower written as real pairs (``TORCH_NEURONX_COMPLEX_DECOMPOSE``).

torch-mlir has no lowering for complex arithmetic (``aten.mul.Scalar``, ``aten._conj`` on complex
values: the complex rotary embeddings of Llama 4 and DeepSeek-V2). The real product decomposes
complex ops before lowering by default from PyTorch 2.13 (its documented
``TORCH_NEURONX_COMPLEX_DECOMPOSE``). Here the graph handed to torch-mlir is re-traced with every
complex value held as its ``view_as_real`` form (a trailing dimension of 2) and every complex op
written in real arithmetic; complex inputs enter as real pairs and complex outputs leave as them.
Only the graph lowered is rewritten: the graph Inductor runs on the host stays complex (its CPU
code handles complex), so users see the same results. An op with no real-pair form here stays a
lowering error naming it.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from ..errors import LoweringError

aten = torch.ops.aten
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}


class _Pair:
    """A complex tensor of shape ``s`` held as a real tensor of shape ``s + (2,)``."""

    def __init__(self, pair: torch.Tensor):
        self.pair = pair

    @property
    def re(self) -> torch.Tensor:
        return self.pair[..., 0]

    @property
    def im(self) -> torch.Tensor:
        return self.pair[..., 1]

    @property
    def ndim(self) -> int:
        return self.pair.dim() - 1


def _of(re: torch.Tensor, im: torch.Tensor) -> _Pair:
    return _Pair(torch.stack([re, im], dim=-1))


def _as_pair(value: Any, like: _Pair) -> _Pair:
    """A real tensor or a Python number as a pair with zero imaginary part."""
    if isinstance(value, _Pair):
        return value
    if isinstance(value, torch.Tensor):
        value = value.to(like.pair.dtype)
        return _of(value, torch.zeros_like(value))
    number = complex(value)
    return _Pair(torch.tensor([number.real, number.imag], dtype=like.pair.dtype, device=like.pair.device))


def _dim(dim: int, ndim: int) -> int:
    """A dimension of the complex tensor, counted from the front (the pair dimension is last)."""
    return dim % ndim if ndim else 0


def _mul(a: Any, b: Any) -> _Pair:
    if not isinstance(a, _Pair):
        a, b = b, a
    if isinstance(b, _Pair):
        return _of(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re)
    if isinstance(b, complex):
        return _mul(a, _as_pair(b, a))
    return _Pair(a.pair * (b.unsqueeze(-1) if isinstance(b, torch.Tensor) else b))


def _div(a: Any, b: Any) -> _Pair:
    if isinstance(b, _Pair) or isinstance(b, complex):
        like = a if isinstance(a, _Pair) else b
        b = _as_pair(b, like)
        scale = b.re * b.re + b.im * b.im
        return _mul(_as_pair(a, like), _of(b.re / scale, -b.im / scale))
    return _Pair(a.pair / (b.unsqueeze(-1) if isinstance(b, torch.Tensor) else b))


def _add(a: Any, b: Any, alpha: Any = 1, sign: int = 1) -> _Pair:
    like = a if isinstance(a, _Pair) else b
    return _Pair(_as_pair(a, like).pair + sign * alpha * _as_pair(b, like).pair)


def _conj(a: _Pair) -> _Pair:
    return _of(a.re, -a.im)


def _to_copy(a: Any, dtype: torch.dtype | None = None, **kwargs: Any) -> Any:
    """A dtype conversion into, out of or between complex dtypes (the real part when leaving)."""
    kwargs.pop("memory_format", None)  # a layout of the complex tensor, not of its pairs
    if not isinstance(a, _Pair):
        real = aten._to_copy.default(a, dtype=_REAL_OF[dtype], **kwargs)
        return _of(real, torch.zeros_like(real))
    if dtype is None or dtype.is_complex:
        return _Pair(aten._to_copy.default(a.pair, dtype=_REAL_OF.get(dtype), **kwargs))
    return aten._to_copy.default(a.re, dtype=dtype, **kwargs)


def _sizes(sizes: Sequence[int]) -> list:
    return [*sizes, 2]


def _on_pair(op: Callable, arguments: Callable[..., tuple] = lambda a, *rest, **kw: (rest, kw)) -> Callable:
    """``op`` applied to the pair tensor, with the other arguments rewritten by ``arguments``."""
    def apply(a: _Pair, *rest: Any, **kwargs: Any) -> _Pair:
        new_rest, new_kwargs = arguments(a, *rest, **kwargs)
        return _Pair(op(a.pair, *new_rest, **new_kwargs))
    return apply


def _first_dim(a: _Pair, dim: int, *rest: Any, **kwargs: Any) -> tuple:
    return (_dim(dim, a.ndim), *rest), kwargs


def _dims(a: _Pair, dims: Sequence[int] | None = None, *rest: Any, **kwargs: Any) -> tuple:
    chosen = range(a.ndim) if dims is None or len(dims) == 0 else dims
    return ([_dim(d, a.ndim) for d in chosen], *rest), kwargs


def _sized(a: _Pair, sizes: Sequence[int], *rest: Any, **kwargs: Any) -> tuple:
    return (_sizes(sizes), *rest), kwargs


def _cat(tensors: Sequence[Any], dim: int = 0) -> _Pair:
    like = next(t for t in tensors if isinstance(t, _Pair))
    return _Pair(torch.cat([_as_pair(t, like).pair for t in tensors], _dim(dim, like.ndim)))


def _stack(tensors: Sequence[Any], dim: int = 0) -> _Pair:
    like = next(t for t in tensors if isinstance(t, _Pair))
    return _Pair(torch.stack([_as_pair(t, like).pair for t in tensors], dim % (like.ndim + 1)))


def _identity(a: Any, *_: Any, **__: Any) -> Any:
    return a


_REAL_PAIR_FORMS: dict[Any, Callable[..., Any]] = {
    aten.view_as_complex.default: _Pair,
    aten.view_as_real.default: lambda a: a.pair,
    aten.complex.default: _of,
    aten.polar.default: lambda magnitude, angle: _of(magnitude * torch.cos(angle), magnitude * torch.sin(angle)),
    aten.real.default: lambda a: a.re,
    aten.imag.default: lambda a: a.im,
    aten.mul.Tensor: _mul,
    aten.mul.Scalar: _mul,
    aten.div.Tensor: _div,
    aten.div.Scalar: _div,
    aten.add.Tensor: _add,
    aten.add.Scalar: _add,
    aten.sub.Tensor: lambda a, b, alpha=1: _add(a, b, alpha, sign=-1),
    aten.sub.Scalar: lambda a, b, alpha=1: _add(a, b, alpha, sign=-1),
    aten.neg.default: lambda a: _Pair(-a.pair),
    aten.conj.default: _conj,
    aten._conj.default: _conj,
    aten.conj_physical.default: _conj,
    aten.resolve_conj.default: _identity,
    aten.resolve_neg.default: _identity,
    aten.alias.default: _identity,
    aten.detach.default: _identity,
    aten.clone.default: lambda a, **_: _Pair(a.pair.clone()),
    aten._to_copy.default: _to_copy,
    aten.view.default: _on_pair(aten.view.default, _sized),
    aten._unsafe_view.default: _on_pair(aten._unsafe_view.default, _sized),
    aten.reshape.default: _on_pair(aten.reshape.default, _sized),
    aten.expand.default: _on_pair(aten.expand.default, _sized),
    aten.unsqueeze.default: lambda a, dim: _Pair(a.pair.unsqueeze(dim % (a.ndim + 1))),
    aten.squeeze.dim: _on_pair(aten.squeeze.dim, _first_dim),
    aten.squeeze.dims: _on_pair(aten.squeeze.dims, _dims),
    aten.select.int: _on_pair(aten.select.int, _first_dim),
    aten.slice.Tensor: _on_pair(aten.slice.Tensor, _first_dim),
    aten.transpose.int: lambda a, d0, d1: _Pair(a.pair.transpose(_dim(d0, a.ndim), _dim(d1, a.ndim))),
    aten.permute.default: lambda a, dims: _Pair(a.pair.permute(*[_dim(d, a.ndim) for d in dims], a.ndim)),
    aten.sum.dim_IntList: _on_pair(aten.sum.dim_IntList, _dims),
    aten.index.Tensor: _on_pair(aten.index.Tensor),
    aten.index_select.default: _on_pair(aten.index_select.default, _first_dim),
    aten.cat.default: _cat,
    aten.stack.default: _stack,
}


def _is_complex(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_complex


def has_complex_values(gm: torch.fx.GraphModule) -> bool:
    """Does any node of ``gm`` hold a complex tensor?"""
    return any(any(_is_complex(v) for v in pytree.tree_leaves(node.meta.get("val"))) for node in gm.graph.nodes)


class _RealPairInterpreter(torch.fx.Interpreter):
    """Runs a graph with complex values as :class:`_Pair`: ops on them take their real-pair form."""

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        leaves = pytree.tree_leaves((args, kwargs))
        if not any(isinstance(leaf, _Pair) for leaf in leaves) and not _is_complex(self._value):
            return super().call_function(target, args, kwargs)
        form = _REAL_PAIR_FORMS.get(target)
        if form is None:
            raise LoweringError(
                f"torch-mlir could not lower the graph to StableHLO: no lowering for torch.{target} on "
                "complex values (no real-pair form in TORCH_NEURONX_COMPLEX_DECOMPOSE's rewrite)",
                [f"failed to legalize operation 'torch.{target}'"])
        return form(*args, **kwargs)

    def run_node(self, node: torch.fx.Node) -> Any:
        self._value = node.meta.get("val")
        return super().run_node(node)

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        value = super().get_attr(target, args, kwargs)
        return _Pair(torch.view_as_real(value).clone()) if _is_complex(value) else value


def _pair_twins(values: Sequence[Any]) -> list[Any]:
    """Fake CPU tracing inputs for the graph inputs ``values``: a complex tensor's real-pair form."""
    def twin(v: Any) -> Any:
        if _is_complex(v):
            return torch.empty((*v.shape, 2), dtype=_REAL_OF[v.dtype], device="cpu")
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="cpu")
        return v

    with FakeTensorMode():
        return [twin(v) for v in values]


def as_real_pairs(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` re-traced with its complex values as real pairs (inputs and outputs too), for lowering."""
    placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    complex_inputs = [_is_complex(v) for v in placeholders]

    def run(*inputs: Any) -> Any:
        wrapped = [_Pair(x) if is_complex else x for x, is_complex in zip(inputs, complex_inputs)]
        outputs = _RealPairInterpreter(gm).run(*wrapped)
        return pytree.tree_map(lambda v: v.pair if isinstance(v, _Pair) else v, outputs)

    return make_fx(run, tracing_mode="fake")(*_pair_twins(placeholders))
