"""The eager kernel key: what makes the real product compile a new kernel.

Every expectation comes from the real product's source, cited as TR path:lines (TR and its
public URL: ARCHITECTURE.md, "How the real product is cited"): the key string of
``torch_neuronx/kernels/base.py:103-160`` and the optimizer kernels of
``python_ops/torch_mlir/ops/foreach_ops.py`` and ``optimizer.py``. Compilations are counted through
``torch_neuronx.metrics()`` in a fresh emulated process on an empty cache.
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from torch_neuronx import _C
from torch_neuronx.accounting import add_signature_listener, remove_signature_listener, use_neff_cache
from torch_neuronx.accounting.kernel_key import (
    STATIC_ARGUMENTS,
    StaticArgument,
    install,
    static_argument_names,
    validate,
)

pytestmark = pytest.mark.fast


@pytest.fixture(autouse=True)
def fresh_process(private_neff_cache):
    """An empty cache and nothing compiled yet, as in a new process."""
    return private_neff_cache


def compilations() -> int:
    return torch_neuronx.metrics()["compilation_cache"]["total_compilations"]


def new_kernels(fn) -> int:
    before = compilations()
    fn()
    return compilations() - before


def _x():
    return torch.randn(4, 4, device="neuron")


def _index(x):
    return torch.arange(x.shape[0], device=x.device)


# One case per row of the static-argument table: (call with the static value,
# two static values, call with a non-static scalar or None, two such values).
ROW_CASES = {
    ("aten::add", "alpha"): (lambda x, v: torch.add(x, x, alpha=v), (2, 3),
                             lambda x, w: torch.add(x, w, alpha=2), (0.5, 0.7)),
    ("aten::add_", "alpha"): (lambda x, v: x.add_(x, alpha=v), (2, 3),
                              lambda x, w: x.add_(w, alpha=2), (0.5, 0.7)),
    ("aten::sub", "alpha"): (lambda x, v: torch.sub(x, x, alpha=v), (2, 3),
                             lambda x, w: torch.sub(x, w, alpha=2), (0.5, 0.7)),
    ("aten::sub_", "alpha"): (lambda x, v: x.sub_(x, alpha=v), (2, 3),
                              lambda x, w: x.sub_(w, alpha=2), (0.5, 0.7)),
    ("aten::pow", "exponent"): (lambda x, v: torch.pow(x, v), (2.0, 3.0),
                                lambda x, w: torch.pow(w, x), (2.0, 3.0)),
    ("aten::pow_", "exponent"): (lambda x, v: x.pow_(v), (1.0, 2.0), None, ()),
    ("aten::div", "rounding_mode"): (lambda x, v: torch.div(x, x, rounding_mode=v), ("trunc", "floor"),
                                     lambda x, w: torch.div(x, w, rounding_mode="floor"), (2.0, 3.0)),
    ("aten::div_", "rounding_mode"): (lambda x, v: x.div_(x, rounding_mode=v), ("trunc", "floor"),
                                      lambda x, w: x.div_(w, rounding_mode="floor"), (2.0, 3.0)),
    ("aten::fill_", "value"): (lambda x, v: x.fill_(v), (1.0, 2.0), None, ()),
    ("aten::addmm", "beta"): (lambda x, v: torch.addmm(x, x, x, beta=v), (0.5, 2.0), None, ()),
    ("aten::addmm", "alpha"): (lambda x, v: torch.addmm(x, x, x, alpha=v), (0.5, 2.0), None, ()),
    ("aten::index_add", "alpha"): (lambda x, v: x.index_add(0, _index(x), x, alpha=v), (2, 3), None, ()),
    ("aten::native_dropout", "p"): (lambda x, v: F.dropout(x, v, training=True), (0.1, 0.2), None, ()),
    ("aten::softplus", "beta"): (lambda x, v: F.softplus(x, beta=v), (1.0, 2.0), None, ()),
    ("aten::softplus", "threshold"): (lambda x, v: F.softplus(x, threshold=v), (10.0, 20.0), None, ()),
    ("aten::threshold", "threshold"): (lambda x, v: F.threshold(x, v, 0.0), (0.1, 0.2), None, ()),
    ("aten::threshold", "value"): (lambda x, v: F.threshold(x, 0.1, v), (0.0, 1.0), None, ()),
    ("aten::_foreach_add_", "alpha"): (lambda x, v: torch._foreach_add_([x, x[0]], [x, x[1]], alpha=v), (2, 3),
                                       lambda x, w: torch._foreach_add_([x, x[0]], w), (0.5, 0.7)),
    ("aten::_foreach_sub_", "alpha"): (lambda x, v: torch._foreach_sub_([x, x[0]], [x, x[1]], alpha=v), (2, 3),
                                       lambda x, w: torch._foreach_sub_([x, x[0]], w), (0.5, 0.7)),
    ("*", "dim"): (lambda x, v: x.sum(dim=v), (0, 1), lambda x, w: torch.tril(x, w), (0, 1)),
    ("*", "keepdim"): (lambda x, v: x.sum(dim=0, keepdim=v), (False, True), None, ()),
    ("*", "dtype"): (lambda x, v: x.sum(dtype=v), (torch.float32, torch.bfloat16), None, ()),
}


def test_every_static_row_has_a_case_and_a_source():
    assert set(ROW_CASES) == {(row.op, row.argument) for row in STATIC_ARGUMENTS}
    assert all(row.source.startswith("TR ") for row in STATIC_ARGUMENTS)


@pytest.mark.parametrize("row", sorted(ROW_CASES), ids=lambda r: f"{r[0]}-{r[1]}")
def test_static_value_is_a_new_kernel_other_scalars_are_not(row):
    """A static argument's value is in the key, another Python scalar only by its type
    name ("Values are runtime parameters, not compile-time constants", TR base.py:134-151)."""
    static_call, (first, second), runtime_call, runtime_values = ROW_CASES[row]
    x = _x()
    static_call(x, first)
    assert new_kernels(lambda: static_call(x, first)) == 0
    assert new_kernels(lambda: static_call(x, second)) >= 1
    if runtime_call is not None:
        runtime_call(x, runtime_values[0])
        assert new_kernels(lambda: runtime_call(x, runtime_values[1])) == 0


def test_python_scalar_operand_is_a_runtime_input_its_type_is_not():
    """``x + 0.5``: a wrapped number is keyed as t_()_torch.float64 and moved to the device as an
    input (TR argument_processor.py:93-95);
    changing the type (int <-> float) does compile."""
    x = _x()
    assert new_kernels(lambda: x * 0.5) == 1
    assert new_kernels(lambda: x * 0.7) == 0
    assert new_kernels(lambda: x * 2) == 1
    torch.testing.assert_close((x * 0.7).cpu(), x.cpu() * 0.7)


def test_add_alpha_is_static_three_values_three_kernels():
    """alpha of add.Tensor is static (TR .../ops/binary.py:8-9)."""
    x, y = _x(), _x()
    assert sum(new_kernels(lambda a=a: torch.add(x, y, alpha=a)) for a in (1, 2, 3)) == 3
    assert new_kernels(lambda: torch.add(x, y, alpha=2)) == 0


def test_addcdiv_value_and_lerp_weight_are_runtime_inputs():
    """addcdiv/addcmul ``value`` and lerp_.Scalar ``weight`` are runtime inputs
    (TR .../ops/binary.py:66-73, misc.py:71-81)."""
    x, y, z = _x(), _x(), _x().abs() + 1
    assert new_kernels(lambda: x.addcdiv_(y, z, value=0.1)) == 1
    assert new_kernels(lambda: x.addcdiv_(y, z, value=-0.3)) == 0
    assert new_kernels(lambda: x.addcmul_(y, z, value=0.2)) == 1
    assert new_kernels(lambda: x.addcmul_(y, z, value=0.9)) == 0
    assert new_kernels(lambda: x.lerp_(y, 0.1)) == 1
    assert new_kernels(lambda: x.lerp_(y, 0.5)) == 0


def test_static_table_is_what_cpp_uses():
    """Pushing a table without rows makes alpha a runtime input too."""
    x, y = _x(), _x()
    torch.add(x, y, alpha=2)
    try:
        install(())
        assert new_kernels(lambda: torch.add(x, y, alpha=5)) == 1  # a new key layout: alpha by type
        assert new_kernels(lambda: torch.add(x, y, alpha=7)) == 0
    finally:
        install()
    assert new_kernels(lambda: torch.add(x, y, alpha=7)) == 1


def _overload(schema) -> str:
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def test_argument_masks_of_many_schemas_are_computed_once_each_and_match_the_schemas():
    """A step alternates between dozens of schemas: each thread's mask cache must keep them all,
    never one evicting another (a direct-mapped cache of 512 slots recomputed colliding schemas
    on every call; with 400 schemas some collide in every process). The masks themselves match
    the schema (out=: keyword-only and written) and the installed static table."""
    names = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::"))
    schemas = [torch._C._dispatch_find_schema_or_throw(*n.partition(".")[::2]).schema()
               for n in names[:400]]
    assert len(schemas) == 400
    install()  # a new table: every thread's cache starts empty
    before = _C._argument_mask_computations()
    first = [_C._argument_masks(_overload(s)) for s in schemas]
    assert _C._argument_mask_computations() - before == len(schemas)
    assert [_C._argument_masks(_overload(s)) for s in schemas] == first
    assert _C._argument_mask_computations() - before == len(schemas)  # all hits
    for schema, (static, out) in zip(schemas, first):
        args = schema.arguments
        assert out == sum(1 << i for i, a in enumerate(args)
                          if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
        names = static_argument_names(_overload(schema), [a.name for a in args])
        assert static == sum(1 << i for i, a in enumerate(args) if a.name in names)
    assert any(static for static, _ in first) and any(out for _, out in first)


def test_malformed_rows_are_clear_errors():
    with pytest.raises(ValueError, match="op must be"):
        validate([StaticArgument("add", "alpha", "TR x")])
    with pytest.raises(ValueError, match="argument must be"):
        validate([StaticArgument("aten::add", "", "TR x")])
    with pytest.raises(RuntimeError, match="op pattern and an argument name"):
        _C._set_static_arguments([("aten::add", "")])
    x = _x()
    assert new_kernels(lambda: torch.add(x, x, alpha=2)) == 1  # the table is unchanged


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("neuron")


def _train_step(model, opt, x, scheduler=None):
    model(x).pow(2).mean().backward()
    opt.step()
    if scheduler is not None:
        scheduler.step()
    opt.zero_grad()


def test_default_adamw_with_scheduler_compiles_nothing_after_step_one():
    """AdamW (foreach, capturable=False): its step-dependent lists reach ``_foreach_div_.ScalarList``
    as runtime scalars (TR foreach_ops.py:726-738), so after step 1 there are no new compiles,
    even with an LR scheduler."""
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x = torch.randn(5, 8, device="neuron")
    _train_step(model, opt, x, scheduler)
    after_first = compilations()
    assert after_first > 0
    for _ in range(4):
        _train_step(model, opt, x, scheduler)
    assert compilations() == after_first
    assert "aten::_foreach_mul_.Scalar" in torch_neuronx.get_executed_ops()  # foreach was chosen


def test_sgd_foreach_compiles_once_per_new_learning_rate():
    """SGD, foreach: _foreach_add_(params, grads, alpha=-lr)
    makes alpha static, so every new lr is a new compile (one kernel for the
    whole list; alpha static: TR .../ops/foreach_ops.py:120, 217, 445, 518, 587)."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 8, device="neuron")
    _train_step(model, opt, x)
    for lr, expected in ((0.05, 1), (0.1, 0), (0.05, 0), (0.02, 1)):
        for group in opt.param_groups:
            group["lr"] = lr
        assert new_kernels(lambda: _train_step(model, opt, x)) == expected, lr
    assert "aten::_foreach_add_.List" in torch_neuronx.get_executed_ops()


def test_empty_tensors_compile_nothing():
    """Empty tensors (numel == 0) are short-circuited with no compile (TR kernel.py:818-844)."""
    e, f = torch.empty(0, 3, device="neuron"), torch.empty(0, 3, device="neuron")
    calls = torch_neuronx.metrics()["kernels"]["calls"]
    results = []
    assert new_kernels(lambda: results.extend([e + f, e * 2, e.sum(dim=0)])) == 0
    assert torch_neuronx.metrics()["kernels"]["calls"] == calls
    for got, ref in zip(results, [e.cpu() + f.cpu(), e.cpu() * 2, e.cpu().sum(dim=0)]):
        torch.testing.assert_close(got.cpu(), ref)
    # An empty out= placeholder the kernel resizes is not an empty input:
    # x.abs() runs abs.out into torch.empty(0) and is one kernel.
    x = _x()
    assert new_kernels(lambda: x.abs()) == 1
    assert "aten::abs.out" in torch_neuronx.get_executed_ops()


def test_transposed_input_adds_the_contiguity_kernel_once():
    """Strides are not in the key; a non-contiguous input runs the contiguity kernel
    (contiguous_internal, TR csrc/core/NeuronBindings.cpp:87-140) first."""
    x = torch.randn(4, 6, device="neuron")
    xt = x.t()
    assert new_kernels(lambda: xt * 2.0) == 2   # mul + contiguity kernel
    assert new_kernels(lambda: xt * 3.0) == 0
    per_op = torch_neuronx.metrics()["kernels"]["per_op"]
    assert per_op["aten::contiguous"] == {"calls": 2, "signatures": 1, "misses": 1}
    # A contiguous (6, 4) input is the same mul kernel: layout is not in the key.
    dense = xt.contiguous()
    assert new_kernels(lambda: dense * 2.0) == 0
    torch.testing.assert_close((xt * 3.0).cpu(), x.cpu().t() * 3.0)


@pytest.mark.parametrize("op, call, args, kwargs", [
    ("aten::add.Tensor", lambda x, y: torch.add(x, y, alpha=2), "xy", {"alpha": 2}),
    ("aten::sum.dim_IntList", lambda x, y: x.sum(dim=[0], keepdim=True), "x", {"dim": [0], "keepdim": True}),
    ("aten::tril", lambda x, y: torch.tril(x, 1), "x", {"diagonal": 1}),
    ("aten::cat", lambda x, y: torch.cat([x, y], 1), "", {"tensors": "xy", "dim": 1}),
    ("aten::atan2", lambda x, y: torch.atan2(x, y), "xy", {}),
])
def test_fast_path_and_fallback_give_one_key(op, call, args, kwargs):
    """The unboxed fast path keys typed arguments, the fallback boxed ones
    (``_C._kernel_key`` runs the fallback's keying): the same call, one key."""
    x, y = _x(), torch.randn(4, 4, device="neuron")
    seen = []
    listener = add_signature_listener(lambda name, key, _: seen.append((name, key)))
    try:
        call(x, y)
    finally:
        remove_signature_listener(listener)
    tensors = {"x": x, "y": y}
    kwargs = {k: [tensors[c] for c in v] if k == "tensors" else v for k, v in kwargs.items()}
    expected = _C._kernel_key(op, *[tensors[c] for c in args], **kwargs)
    assert (op, expected) in seen


def test_index_ops_on_the_fast_path_keep_the_fallback_key():
    """index.Tensor / index_put_ take a list of optional tensors, index_copy_
    a static dim: the unboxed path keys them as the boxed one does."""
    x = torch.randn(5, 3, device="neuron")
    i = torch.tensor([4, 0], device="neuron")
    v = torch.randn(2, 3, device="neuron")
    seen = []
    listener = add_signature_listener(lambda name, key, _: seen.append((name, key)))
    try:
        x[i]
        x.index_put_((i,), v)
        x.index_copy_(0, i, v)
    finally:
        remove_signature_listener(listener)
    assert ("aten::index.Tensor", _C._kernel_key("aten::index.Tensor", x, [i])) in seen
    assert ("aten::index_put_", _C._kernel_key("aten::index_put_", x, [i], v)) in seen
    assert ("aten::index_copy_", _C._kernel_key("aten::index_copy_", x, 0, i, v)) in seen


def test_out_variant_on_the_fast_path_keys_its_out_argument_as_the_fallback_does():
    """arange.start_out's out= placeholder is keyed by shape and dtype as an output: empty,
    it is not an empty input (the kernel still runs and is counted)."""
    seen = []
    listener = add_signature_listener(lambda name, key, _: seen.append((name, key)))
    try:
        got = torch.arange(2, 11, 3, device="neuron")
    finally:
        remove_signature_listener(listener)
    placeholder = torch.empty(0, dtype=torch.int64, device="neuron")
    assert ("aten::arange.start_out", _C._kernel_key("aten::arange.start_out", 2, 11, 3, out=placeholder)) in seen
    assert torch.equal(got.cpu(), torch.arange(2, 11, 3))


def test_compilation_cache_counters_use_the_real_names(fresh_process):
    """In-memory hits, persistent hits and compilations are counted separately, under the
    names of _get_compilation_cache_stats (TR csrc/core/NeuronBindings.cpp:1014-1091)."""
    x, y = _x(), _x()
    torch_neuronx.reset_metrics()
    x + y
    x + y
    stats = torch_neuronx.metrics()["compilation_cache"]
    assert (stats["total_compilations"], stats["in_memory_hits"], stats["persistent_hits"]) == (1, 1, 0)
    assert stats["cache_hits"] == 1 and stats["cache_misses"] == 1 and stats["hit_rate"] == 0.5
    use_neff_cache(fresh_process)  # a new process on the same disk cache
    x + y
    stats = torch_neuronx.metrics()["compilation_cache"]
    assert (stats["total_compilations"], stats["in_memory_hits"], stats["persistent_hits"]) == (0, 0, 1)
    assert stats["in_memory_misses"] == 1 and stats["persistent_misses"] == 0
    kernels = torch_neuronx.metrics()["kernels"]
    assert (kernels["misses"], kernels["disk_hits"]) == (0, 1)  # the older names stay


def test_listener_sees_each_new_signature_once_with_meta_arguments():
    x = torch.randn(3, 5, device="neuron")
    xt = torch.randn(5, 3, device="neuron").t()
    seen = []
    listener = add_signature_listener(lambda op, key, args: seen.append((op, key, args)))
    try:
        for _ in range(3):
            torch.add(x, xt, alpha=2)
    finally:
        remove_signature_listener(listener)
    ops = [op for op, _, _ in seen]
    assert ops == ["aten::contiguous", "aten::add.Tensor"]  # contiguity kernel first, as TR compiles it
    op, key, args = seen[1]
    a, b, alpha = args
    assert a.device.type == "meta" and (a.shape, a.stride(), a.dtype) == (x.shape, x.stride(), x.dtype)
    assert b.device.type == "meta" and b.stride() == xt.stride()
    assert alpha == 2
    assert _C._signature_calls()[key] == 3
    torch_neuronx.reset_metrics()
    assert key not in _C._signature_calls()


def test_failing_listener_warns_once_and_never_breaks_the_op():
    def broken(op, key, args):
        raise KeyError("boom")

    x = torch.randn(2, 7, device="neuron")
    add_signature_listener(broken)
    try:
        with pytest.warns(RuntimeWarning, match="broken.*KeyError"):
            out = x.exp()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x.sin()  # a second failure is not reported again
    finally:
        remove_signature_listener(broken)
    torch.testing.assert_close(out.cpu(), x.cpu().exp())


def test_listener_registration_errors():
    with pytest.raises(TypeError, match="callable"):
        add_signature_listener(3)
    with pytest.raises(ValueError, match="not a signature listener"):
        remove_signature_listener(print)


def _recorded(optimizer_class, lr_lambda, steps=4):
    """The kernels steps after the first compile, as the pilot records them."""
    from torch_neuronx.accounting.recompiles import RecompileRecorder

    model = _mlp()
    opt = optimizer_class(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda) if lr_lambda else None
    x = torch.randn(5, 8, device="neuron")
    with RecompileRecorder() as recorder:
        for step in range(steps):
            if step:
                recorder.next_iteration()
            _train_step(model, opt, x, scheduler)
    return recorder


def test_recorder_names_the_static_learning_rate_of_sgd_with_a_changing_schedule():
    """SGD's rate is the static alpha of _foreach_add_ (TR foreach_ops.py:120); a rate that changes every
    step compiles the update every step, and the recorder says which op and argument."""
    recorder = _recorded(torch.optim.SGD, lambda i: 1.0 - i / 10)
    [row] = recorder.summary()
    assert row["op"] == "aten::_foreach_add_.List" and row["static_arguments"] == ["alpha"]
    assert (row["new_kernels"], row["iterations"]) == (3, 3)
    assert row["example_values"] == [repr(-0.1 * (1.0 - 1 / 10))]
    assert "learning rate" in row["remedy"] and "StepLR" in row["remedy"]
    assert [r.iteration for r in recorder.recompiles] == [1, 2, 3]


@pytest.mark.parametrize("optimizer_class, lr_lambda", [(torch.optim.SGD, None),
                                                        (torch.optim.AdamW, lambda i: 1.0 - i / 10)],
                         ids=["sgd-constant-rate", "adamw-changing-rate"])
def test_recorder_finds_nothing_in_a_steady_loop(optimizer_class, lr_lambda):
    """SGD at a constant rate, and AdamW with a rate that changes every step (its rate is
    a runtime input), compile nothing after the first step."""
    recorder = _recorded(optimizer_class, lr_lambda)
    assert recorder.recompiles == [] and recorder.summary() == []


def test_recorder_tells_new_shapes_from_new_static_values():
    from torch_neuronx.accounting.recompiles import RecompileRecorder

    x = _x()
    with RecompileRecorder() as recorder:
        torch.add(x, x, alpha=2)
        recorder.next_iteration()
        torch.add(x, x, alpha=2)                       # a repeat: nothing
        torch.add(x[:2].contiguous(), x[:2].contiguous(), alpha=2)  # new shape
        torch.add(x, x, alpha=3)                       # new static value
    ops = {(r.op, r.static_arguments) for r in recorder.recompiles}
    assert ops == {("aten::add.Tensor", ()), ("aten::add.Tensor", ("alpha",))}
    assert recorder.recompiles[-1].values == ("3",)


@pytest.mark.parametrize("call", [
    pytest.param(lambda x: x.add_(1.5), id="fast-path"),
    pytest.param(lambda x: x.cumsum_(0), id="fallback"),
])
def test_an_interrupt_in_a_listener_reaches_the_user_and_the_op_does_not_run(call):
    """Ctrl-C (or the pilot's SIGTERM) can land while a listener runs; it must stop the
    program, not be swallowed as a listener failure (a pilot once exited 0 after SIGTERM)."""
    x = torch.randn(7, 13, 3, device="neuron")  # a shape no other test uses: a new signature
    before = x.cpu()

    def interrupt(name, key, args):
        raise KeyboardInterrupt

    listener = add_signature_listener(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            call(x)
    finally:
        remove_signature_listener(listener)
    assert torch.equal(x.cpu(), before)
    call(x)  # the signature was recorded; the op runs once the interrupt is handled
    assert torch.allclose(x.cpu(), call(before.clone()))
