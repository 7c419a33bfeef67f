"""Which of the autograd engine's gradient sums the eager device runs in place, for a traced backward.

A tensor used by several ops gets one gradient per use in backward; the engine sums them in the
input buffer of the node that made the tensor (PyTorch ``torch/csrc/autograd/input_buffer.cpp``,
``accumulate`` and ``can_accumulate_inplace``). It sums in place, ``old.add_(new)``, when grad
mode is off and the buffered gradient is a plain tensor (not sparse, nested or a zero tensor),
non-overlapping and dense, and the buffer holds its last reference and the last reference to its
storage (never so for a view: its base, which it keeps, holds the storage too); a sparse buffered
gradient is added into the incoming one by the same test (``new.add_(old)``); every other sum is
out of place, ``old + new``. A tensor counts as a subclass,
and so is never summed in place, when it is meta or fake or any dispatch mode is active
(``ATen/TensorSubclassLikeUtils.h``, ``isTensorSubclassLike``): a traced backward sees ``add``
where the ``neuron`` device runs, and compiles, ``add_``.

:class:`GradientSums` applies the engine's test to a traced backward. Hooks on every node follow
the engine: a node's post-hook sees the gradients it is about to route, in routing order (each to
the buffer of ``next_functions[i]``), its pre-hook that its buffer is consumed. From these it keeps
the references the engine holds on the device: the pending buffers, the node's output list while
it is routed (a gradient moved into an empty buffer leaves it, one added to a full buffer stays
until the list goes), and the gradient ``backward`` started from (held by its caller). It keeps
identities only (TensorImpl and StorageImpl addresses, never a tensor), so the trace's own memory
and reference counts are untouched.
"""
from __future__ import annotations

import dataclasses
from collections import deque

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false

ADD, ADD_IN_PLACE = torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor


@dataclasses.dataclass(frozen=True)
class _Gradient:
    """What the engine's test reads of a held gradient."""

    impl: int | None  # TensorImpl address; None: a sum's result, which nothing else holds
    storage: int | None  # StorageImpl address; None: no storage (sparse, nested)
    view: bool  # a view's base (which the view keeps) holds its storage too
    sparse: bool
    plain_dense: bool  # plain (not nested, not a zero tensor), non-overlapping and dense

    @classmethod
    def of(cls, t: torch.Tensor) -> "_Gradient":
        strided = t.layout == torch.strided and not t.is_nested
        return cls(t._cdata, t.untyped_storage()._cdata if strided else None, t._is_view(),
                   t.is_sparse or t.is_sparse_csr,
                   strided and not t._is_zerotensor() and is_non_overlapping_and_dense_or_false(t))

    def held_once(self, holders: list["_Gradient"]) -> bool:
        """The engine's ``use_count() == 1`` on the tensor and on its storage."""
        if self.impl is None:
            return True
        if self.storage is None or self.view:
            return False
        sharing_storage = {h.impl for h in holders if h.storage == self.storage}
        return sum(h.impl == self.impl for h in holders) == 1 and sharing_storage == {self.impl}


_SUM = _Gradient(None, None, False, False, True)  # the result of a sum: fresh (or summed in place, so held once), dense
_FROM_CALLER = _Gradient(None, None, False, False, False)  # what backward started from: its caller holds it too


def _in_place(old: _Gradient, new: _Gradient, holders: list[_Gradient]) -> bool:
    """``InputBuffer``'s ``accumulate``: is ``old + new`` an ``add_`` on the device?"""
    if torch.is_grad_enabled():  # create_graph: the sum is recorded, never in place
        return False
    target = new if old.sparse else old  # ATen adds a sparse gradient into the dense one
    return not new.sparse and target.plain_dense and target.held_once(holders)


class GradientSums:
    """The gradient sums of one ``backward`` from ``roots``, each marked in place or not as the
    device's engine would run it; a dispatch mode asks :meth:`device_op` for each ``add``.

    Use as a context: the hooks are on the graph while it is open."""

    def __init__(self, roots: list[torch.Tensor]) -> None:
        self._nodes = _graph([r.grad_fn for r in roots])  # held, so ``next_functions`` keeps their wrappers
        self._roots = {(id(r.grad_fn), r.output_nr) for r in roots}
        self._pending: dict[tuple[int, int], _Gradient] = dict.fromkeys(self._roots, _FROM_CALLER)
        self._from_caller: list[_Gradient] = []
        self._sums: deque[tuple[int, bool]] = deque()  # (incoming gradient's impl, in place), routing order
        self._handles: list = []

    def __enter__(self) -> "GradientSums":
        for node in self._nodes:
            self._handles.append(node.register_prehook(lambda grads, node=node: self._consume(node, grads)))
            if node.next_functions:
                self._handles.append(node.register_hook(lambda outs, _grads, node=node: self._route(node, outs)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def device_op(self, func, args: tuple):
        """``add_`` for the engine's next sum if the device runs it in place, else ``func``."""
        if func is not ADD or not self._sums:
            return func
        incoming, in_place = self._sums[0]
        if not any(isinstance(a, torch.Tensor) and a._cdata == incoming for a in args[:2]):
            return func  # an add of the node's own formula, not the engine's sum
        self._sums.popleft()
        return ADD_IN_PLACE if in_place else func

    def _consume(self, node, grads: tuple) -> None:
        """A node runs: its buffer leaves the engine (the first node's held the gradient
        ``backward`` started from, which the caller still holds)."""
        self._sums.clear()
        for nr, grad in enumerate(grads):
            if (id(node), nr) in self._roots and grad is not None:
                self._from_caller.append(_Gradient.of(grad))
            self._pending.pop((id(node), nr), None)

    def _route(self, node, outputs: tuple) -> None:
        """The engine routes ``node``'s outputs, in order: into an empty buffer (moved out of the
        output list), or summed with the buffer's gradient (left in the list)."""
        self._sums.clear()
        listed = [_Gradient.of(g) if g is not None else None for g in outputs]
        for i, (grad, (consumer, nr)) in enumerate(zip(outputs, node.next_functions)):
            if grad is None or consumer is None:
                continue
            slot = (id(consumer), nr)
            if slot not in self._pending:
                self._pending[slot], listed[i] = listed[i], None
                continue
            holders = [*self._pending.values(), *self._from_caller, *filter(None, listed)]
            self._sums.append((grad._cdata, _in_place(self._pending[slot], listed[i], holders)))
            self._pending[slot] = _SUM


def _graph(roots: list) -> list:
    """Every node reachable from ``roots`` (each once)."""
    seen, order, todo = set(), [], [r for r in roots if r is not None]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        todo += [n for n, _ in node.next_functions if n is not None]
    return order
