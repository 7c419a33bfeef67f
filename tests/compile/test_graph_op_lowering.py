"""What Dynamo and AOTAutograd put in a graph lowers to StableHLO.

Graph lowering is on by default, so an op that torch-mlir cannot lower fails
``torch.compile(backend="neuron")``. These ops reached torch-mlir only
because of how the graph was built, not because Trainium lacks them:
the primitives of Inductor's decomposition table, ``prims.fma`` (eager attention's
softmax backward) and ``prims.rev`` (``flip``: Mamba-2's chunked scan), ``histc`` (MoE token
counts) and a 1-D ``convolution_backward`` (Mamba's causal conv1d), the foreach ops
of a compiled ``optimizer.step()``, and the Scalar forms of ``fmod`` and the
bitwise ops (sliding-window caches), which torch-mlir 20261001 leaves
half-converted. ``index_put`` (Gemma 3's masked write of token ids) is decomposed in the
AOTAutograd table, as the real product's compile table does. Each decomposition is checked
against the op on CPU, and each graph holding the op must lower.

What the real product does instead: its backend calls ``aot_autograd(..., decompositions=...)``
with its own table and lowers with torch-mlir (TR ``neuron_dynamo_backend/backend.py:285-305``), so
Inductor's primitives never reach it; foreach ops are registered Neuron kernels
(``_foreach_{add,sub,mul,div}``, ``_foreach_norm``: TR ``.../ops/foreach_ops.py``) or PyTorch's
per-tensor loops.
"""
from __future__ import annotations

import copy
import textwrap
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch.fx.experimental.proxy_tensor import make_fx

import children
import torch_neuronx
from torch_neuronx.compile.lowering import decompositions, lower

pytest.importorskip("torch_mlir")
from torch._inductor import inductor_prims  # noqa: E402  (defines prims.fma)


@pytest.fixture(autouse=True)
def _fresh(private_neff_cache, monkeypatch):
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    monkeypatch.delenv("TORCHNEURON_LOWER_GRAPHS", raising=False)  # on by default
    yield
    torch._dynamo.reset()


def _targets(gm: torch.fx.GraphModule) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def test_a_graph_holding_prims_fma_lowers_to_multiply_and_add():
    a, b, c = torch.randn(4, 8), torch.randn(4, 1), torch.randn(4, 8)
    gm = make_fx(lambda a, b, c: inductor_prims.fma(a, b, c) * 2)(a, b, c)
    assert inductor_prims.fma in _targets(gm)
    lowered = lower.lower_fx_graph(gm)
    assert "stablehlo.multiply" in lowered.text and "stablehlo.add" in lowered.text
    torch.testing.assert_close(decompositions.decomposed(gm)(a, b, c), (a * b + c) * 2)
    assert inductor_prims.fma not in _targets(decompositions.decomposed(gm))


def test_a_graph_holding_prims_rev_lowers_to_a_reverse():
    """Inductor's table writes ``flip`` as ``prims.rev``, which torch-mlir cannot lower."""
    x = torch.randn(3, 4, 5)
    gm = make_fx(lambda t: torch.ops.prims.rev(t, [0, 2]) * 2)(x)
    assert torch.ops.prims.rev.default in _targets(gm)
    assert "stablehlo.reverse" in lower.lower_fx_graph(gm).text
    torch.testing.assert_close(decompositions.decomposed(gm)(x), x.flip(0, 2) * 2)


def test_a_compiled_flip_and_its_backward_lower_and_match_cpu():
    """Mamba-2 and Falcon-H1 flip their chunked scans; the backward of a flip is a flip."""
    x = torch.randn(2, 6, 4)

    def reversed_cumsum(t):
        return t.flip(1).cumsum(1).flip(1).square().sum()

    x_dev = x.to("neuron").requires_grad_()
    loss = torch.compile(reversed_cumsum, backend="neuron", fullgraph=True)(x_dev)
    loss.backward()
    x_cpu = x.clone().requires_grad_()
    expected = reversed_cumsum(x_cpu)
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected.detach())
    torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad)
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert [r["lowering"] for r in records] == ["lowered", "lowered"]


@pytest.mark.parametrize("x, bins, low, high", [
    (torch.randn(300, generator=torch.Generator().manual_seed(3)) * 2, 10, -1.0, 1.0),  # values outside
    (torch.randn(4, 50, generator=torch.Generator().manual_seed(4)), 7, 0, 0),  # the data's range
    (torch.full((6,), 2.5), 4, 0, 0),  # constant data: range widened by 1 each side
    (torch.linspace(0, 1, 33, dtype=torch.float64), 8, 0.0, 1.0),  # max falls in the last bin
], ids=["range", "data-range", "constant", "float64-edges"])
def test_a_graph_holding_histc_lowers_and_counts_as_the_cpu_kernel(x, bins, low, high):
    """The real product's compile table decomposes ``histc`` (the MoE routers' token counts)."""
    gm = make_fx(lambda t: torch.histc(t, bins, low, high) * 1)(x)
    assert torch.ops.aten.histc.default in _targets(gm)
    assert "stablehlo.scatter" in lower.lower_fx_graph(gm).text
    torch.testing.assert_close(decompositions.decomposed(gm)(x), torch.histc(x, bins, low, high), rtol=0, atol=0)


def test_a_compiled_moe_token_count_on_integers_lowers_and_matches_cpu():
    """Transformers' MoE routers count tokens per expert with ``histc`` on integer expert ids
    on every non-CPU device; the CPU has no integer ``histc``, so the count is checked with ``bincount``."""
    experts = torch.randint(0, 8, (16, 2), generator=torch.Generator().manual_seed(5))

    def tokens_per_expert(ids):
        return torch.histc(ids, bins=8, min=0, max=7)

    counts = torch.compile(tokens_per_expert, backend="neuron", fullgraph=True)(experts.to("neuron"))
    assert counts.dtype == torch.int64
    torch.testing.assert_close(counts.cpu(), torch.bincount(experts.flatten(), minlength=8))
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert [r["lowering"] for r in records] == ["lowered"]


@pytest.mark.parametrize("channels, out_channels, taps, stride, padding, dilation, groups, bias", [
    (8, 8, 4, 1, 3, 1, 8, True),  # Mamba's causal conv1d: depthwise, padded by taps - 1
    (6, 4, 3, 2, 1, 2, 2, False),  # grouped, strided, dilated
    (4, 6, 2, 1, 0, 1, 1, True),
], ids=["depthwise", "grouped-strided-dilated", "dense"])
def test_a_graph_holding_conv1d_backward_lowers_and_matches_autograd(channels, out_channels, taps, stride,
                                                                     padding, dilation, groups, bias):
    """torch-mlir fails ``convolution_backward`` itself (a ``torch.constant.int`` left)."""
    x = torch.randn(2, channels, 13, requires_grad=True)
    w = torch.randn(out_channels, channels // groups, taps, requires_grad=True)
    b = torch.randn(out_channels, requires_grad=True) if bias else None
    y = torch.nn.functional.conv1d(x, w, b, stride, padding, dilation, groups)
    grad_y = torch.randn_like(y)
    y.backward(grad_y)

    def backward(grad_y, x, w):
        return torch.ops.aten.convolution_backward(grad_y, x, w, [out_channels] if bias else None, [stride],
                                                   [padding], [dilation], False, [0], groups, [True, True, bias])

    gm = make_fx(backward)(grad_y, x.detach(), w.detach())
    assert "stablehlo.convolution" in lower.lower_fx_graph(gm).text
    got = decompositions.decomposed(gm)(grad_y, x.detach(), w.detach())
    torch.testing.assert_close(got[0], x.grad)
    torch.testing.assert_close(got[1], w.grad)
    if bias:
        torch.testing.assert_close(got[2], b.grad)


def test_a_compiled_causal_conv1d_training_step_lowers_and_matches_cpu():
    conv = torch.nn.Conv1d(8, 8, kernel_size=4, padding=3, groups=8)
    x = torch.randn(2, 8, 10, generator=torch.Generator().manual_seed(6))

    def loss_of(module, x):
        return module(x)[..., : x.shape[-1]].square().sum()

    device_conv = copy.deepcopy(conv).to("neuron")
    loss = torch.compile(loss_of, backend="neuron", fullgraph=True)(device_conv, x.to("neuron"))
    loss.backward()
    expected = loss_of(conv, x)
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected.detach())
    for got, want in zip(device_conv.parameters(), conv.parameters()):
        torch.testing.assert_close(got.grad.cpu(), want.grad)
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert [r["lowering"] for r in records] == ["lowered", "lowered"]


def test_eager_attention_softmax_backward_compiles_lowered_and_matches_cpu():
    """Inductor's decomposition of ``_softmax_backward_data`` is where the fma comes from."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 8, requires_grad=True), torch.randn(2, 4, 8)

    def scores(q, k):
        return torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1).square().sum()

    scores(q, k).backward()
    q_dev = q.detach().to("neuron").requires_grad_()
    torch.compile(scores, backend="neuron", fullgraph=True)(q_dev, k.to("neuron")).backward()
    torch.testing.assert_close(q_dev.grad.cpu(), q.grad)
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert [r["lowering"] for r in records] == ["lowered", "lowered"]


_FOREACH_CASES = [
    ("_foreach_add.Scalar", lambda xs, ys: torch._foreach_add(xs, 0.5)),
    ("_foreach_add.List", lambda xs, ys: torch._foreach_add(xs, ys, alpha=-0.25)),
    ("_foreach_add.ScalarList", lambda xs, ys: torch._foreach_add(xs, [1.0, 2.0])),
    ("_foreach_mul.Tensor", lambda xs, ys: torch._foreach_mul(xs, torch.tensor(3.0))),
    ("_foreach_lerp.Scalar", lambda xs, ys: torch._foreach_lerp(xs, ys, 0.1)),
    ("_foreach_addcmul.Scalar", lambda xs, ys: torch._foreach_addcmul(xs, ys, ys, value=0.5)),
    ("_foreach_addcdiv.ScalarList", lambda xs, ys: torch._foreach_addcdiv(xs, ys, [y.abs() + 1 for y in ys], [0.5, -2.0])),
    ("_foreach_addcdiv.Tensor", lambda xs, ys: torch._foreach_addcdiv(xs, ys, [y.abs() + 1 for y in ys], torch.tensor([0.5, -2.0]))),
    ("_foreach_sqrt.default", lambda xs, ys: torch._foreach_sqrt([x.abs() for x in xs])),
    ("_foreach_norm.Scalar", lambda xs, ys: torch._foreach_norm(xs, 2)),
    ("_foreach_pow.ScalarAndTensor", lambda xs, ys: torch._foreach_pow(2.0, xs)),
    ("_foreach_maximum.List", lambda xs, ys: torch._foreach_maximum(xs, ys)),
]


@pytest.mark.parametrize("name, fn", _FOREACH_CASES, ids=[c[0] for c in _FOREACH_CASES])
def test_foreach_op_lowers_and_its_decomposition_matches_the_op(name, fn):
    torch.manual_seed(0)
    xs = [torch.randn(3, 4), torch.randn(5)]
    ys = [torch.randn(3, 4), torch.randn(5)]
    gm = make_fx(fn)(xs, ys)
    op_names = {str(t) for t in _targets(gm)}
    assert f"aten.{name}" in op_names  # the foreach op itself reaches the lowering
    assert lower.lower_fx_graph(gm).op_count > 0
    decomposed = decompositions.decomposed(gm)
    assert not any("_foreach_" in str(t) for t in _targets(decomposed))
    torch.testing.assert_close(decomposed(*xs, *ys), fn(xs, ys))  # the graph takes the tensors flat


@pytest.mark.parametrize("dtype, scalar", [(torch.int64, 8), (torch.int32, 3), (torch.float32, 2.5),
                                           (torch.float32, 3), (torch.int64, 2.5)])
def test_fmod_with_a_python_scalar_lowers_and_keeps_its_dtype(dtype, scalar):
    """Mistral's sliding-window cache indexes with ``fmod(positions, window)``."""
    x = (torch.arange(-6, 10) * 3).to(dtype)
    gm = make_fx(lambda t: torch.fmod(t + 1, scalar))(x)
    assert torch.ops.aten.fmod.Scalar in _targets(gm)
    lower.lower_fx_graph(gm)
    out = decompositions.decomposed(gm)(x)
    expected = torch.fmod(x + 1, scalar)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("fn", [
    lambda t: torch.bitwise_or(t, 5), lambda t: torch.bitwise_xor(t, 6),
    lambda t: torch.bitwise_left_shift(t, 2), lambda t: torch.bitwise_right_shift(t, 1),
], ids=["or", "xor", "left_shift", "right_shift"])
def test_bitwise_ops_with_a_python_scalar_lower(fn):
    x = torch.arange(16, dtype=torch.int32)
    gm = make_fx(fn)(x)
    lower.lower_fx_graph(gm)
    torch.testing.assert_close(decompositions.decomposed(gm)(x), fn(x))


def test_unsorted_topk_lowers_as_sorted():
    """MoE routers call ``topk(..., sorted=False)``; torch-mlir lowers only the sorted form,
    and a sorted result is a valid unsorted one."""
    x = torch.randn(4, 8)
    gm = make_fx(lambda t: torch.topk(t, 3, sorted=False).values.sum(-1))(x)
    lower.lower_fx_graph(gm)
    torch.testing.assert_close(decompositions.decomposed(gm)(x), torch.topk(x, 3).values.sum(-1))


def test_a_failure_naming_only_a_constant_is_traced_to_the_op(monkeypatch):
    """Without its decomposition, torch-mlir fails ``fmod.Scalar`` naming only the
    ``torch.constant.int`` it left unconverted; the compile error names the op."""
    table = {k: v for k, v in decompositions.graph_op_decompositions().items()
             if k is not torch.ops.aten.fmod.Scalar}
    monkeypatch.setattr(decompositions, "graph_op_decompositions", lambda: table)
    fn = torch.compile(lambda x: torch.fmod(x * 3, 8), backend="neuron")
    with pytest.raises(Exception) as info:
        fn(torch.arange(16).to("neuron"))
    message = str(info.value)
    assert "torch.constant.int" in message and "aten::fmod.Scalar" in message


def _optimizer_run(device: str, make, steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.randn(8, 4).to(device).requires_grad_(), torch.randn(4).to(device).requires_grad_()]
    optimizer = make(params)
    step = torch.compile(optimizer.step, backend="neuron") if device == "neuron" else optimizer.step
    for i in range(steps):
        for p in params:
            p.grad = p.detach() * (i + 1) - 0.5
        step()
    return [p.detach().cpu() for p in params]


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
], ids=["adamw-foreach", "adamw-fused", "sgd-foreach", "sgd-fused"])
def test_compiled_optimizer_step_matches_cpu(make):
    compiled = _optimizer_run("neuron", make)
    eager_cpu = _optimizer_run("cpu", make)
    for got, want in zip(compiled, eager_cpu):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # Every graph Dynamo made of the step lowered (a fused step may run as one eager kernel;
    # a foreach step is graphs of foreach ops).
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert all(r["lowering"] == "lowered" for r in records), [r["lowering"] for r in records]
    assert records or make([torch.zeros(1, requires_grad=True)]).defaults.get("fused")


COMPILE_FAILS = textwrap.dedent("""
    import sys, torch
    model = torch.nn.Linear(4, 4).to("neuron")
    fn = torch.compile(lambda x: torch.special.erfinv(model(x)).sum(), backend="neuron")
    x = torch.rand(2, 4, device="neuron", requires_grad=True)
    try:
        fn(x).backward()
    except Exception as exc:
        print("compile error:", type(exc).__name__)
    sys.exit(7)
""")


BACKWARD_FAILS = textwrap.dedent("""
    import sys, torch, torch_neuronx
    from torch._inductor import inductor_prims
    from torch_neuronx.compile.lowering import decompositions
    decompositions.graph_op_decompositions().pop(inductor_prims.fma)  # without the rewrite the backward fails
    model = torch.nn.Linear(8, 8).to("neuron")
    fn = torch.compile(lambda x: torch.softmax(model(x), -1).pow(2).sum(), backend="neuron")
    x = torch.rand(4, 8, device="neuron", requires_grad=True)
    loss = fn(x)  # the forward graph lowers
    try:
        loss.backward()  # the backward graph (softmax's, with prims.fma) fails on the autograd thread
    except Exception as exc:
        print("compile error:", type(exc).__name__)
    sys.exit(7)
""")


def _compile_error_runs(folder: Path, environ: dict[str, str]) -> dict:
    """The scripts whose compile fails, fresh interpreters two at a time: the forward one beside
    the first backward run (different graphs), then two more backward runs, which find the
    graphs in the compile cache."""
    env = {**environ, "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "1"}
    (folder / "forward.py").write_text(COMPILE_FAILS)
    (folder / "backward.py").write_text(BACKWARD_FAILS)

    def together(*names: str) -> list:
        return children.run_together([folder / f"{name}.py" for name in names], env, folder)

    forward, backward = together("forward", "backward")
    return {"folder": folder, "forward": forward, "backward": [backward, *together("backward", "backward")]}


# Child processes needing nothing from the tests before them.
compile_error_runs = children.lane_fixture("compile_error_runs", _compile_error_runs,
                                           folder_prefix="torchneuron-compile-errors-")


def test_a_compile_error_then_a_normal_exit_returns_the_scripts_own_code(compile_error_runs):
    """The process never aborts at exit after a compile error (it once printed
    'terminate called without an active exception')."""
    done = compile_error_runs["forward"]
    assert "compile error:" in done.stdout, done.stderr[-2000:]
    assert done.returncode == 7, done.stderr[-2000:]
    assert "terminate called" not in done.stderr


def test_a_backward_compile_error_then_a_normal_exit_returns_the_scripts_own_code(compile_error_runs):
    """The backward compiles on the device's autograd thread, which released the failed task's
    Python error after the script had started to exit, and the process aborted ('terminate called
    without an active exception', exit code 134) in about one run in three; the exit handler waits
    for the device's autograd worker (neuron/autograd_workers.py). Three runs: the race is not forced."""
    for done in compile_error_runs["backward"]:
        assert "compile error: NEFFCompilationError" in done.stdout, done.stderr[-2000:]
        assert done.returncode == 7 and "terminate called" not in done.stderr, done.stderr[-2000:]


# index_put, as the real product's compile table writes it (compile/lowering/decompositions/index_put.py): a where for one
# boolean mask and one value, else a scatter (a scatter-add when accumulating) of the flat positions.
_INDEX_PUT_SEED = torch.Generator().manual_seed(7)
_INDEX_PUT_BASE = torch.randn(4, 5, 6, generator=_INDEX_PUT_SEED)
_INDEX_PUT_CASES = {  # indices, values, accumulate
    "integers-negative": ((torch.tensor([0, 2, -1]),), torch.randn(3, 5, 6, generator=_INDEX_PUT_SEED), False),
    "accumulate-repeated": ((torch.tensor([1, 1, 3]),), torch.randn(3, 5, 6, generator=_INDEX_PUT_SEED), True),
    "slice-then-integers-row-broadcast": ((None, torch.tensor([4, 0])), torch.randn(6, generator=_INDEX_PUT_SEED),
                                          False),
    "integers-apart": ((torch.tensor([0, 2, -1]), None, torch.tensor([1, 5, 0])),
                       torch.randn(3, 5, generator=_INDEX_PUT_SEED), False),
    "broadcast-indices-one-value-accumulate": ((torch.tensor([[0], [3]]), torch.tensor([1, 2, 4])),
                                               torch.tensor(2.5), True),
    "mask-one-value": ((torch.randn(4, 5, generator=_INDEX_PUT_SEED) > 0,), torch.tensor(0.0), False),
    "slice-then-mask": ((None, torch.randn(5, generator=_INDEX_PUT_SEED) > 0), torch.tensor(7.0), False),
}


@pytest.mark.parametrize("case", list(_INDEX_PUT_CASES))
def test_index_put_is_decomposed_as_the_product_does_lowers_and_matches_the_op(case):
    """torch-mlir fails a boolean-mask ``index_put`` (Gemma 3's ``ids[mask] = 0``: a
    ``torch.constant.int`` left); the graph AOTAutograd makes for this backend holds none."""
    from torch_neuronx.compile.lowering.decompositions import aot_decompositions

    indices, values, accumulate = _INDEX_PUT_CASES[case]

    def put(x, v):
        return torch.ops.aten.index_put(x, list(indices), v, accumulate)

    gm = make_fx(put, decomposition_table=aot_decompositions())(_INDEX_PUT_BASE, values)
    assert not _targets(gm) & {torch.ops.aten.index_put.default, torch.ops.aten._unsafe_index_put.default}
    masked = indices[-1].dtype == torch.bool
    assert ("stablehlo.select" if masked else "stablehlo.scatter") in lower.lower_fx_graph(gm).text
    exact = {} if accumulate else {"rtol": 0, "atol": 0}  # repeated positions may add in another order
    torch.testing.assert_close(gm(_INDEX_PUT_BASE, values), put(_INDEX_PUT_BASE, values), **exact)


def test_a_boolean_index_put_the_product_refuses_is_refused_and_counted_shared():
    """A mask with ``accumulate=True`` needs ``nonzero`` (a dynamic shape): the product's table
    refuses it, so the failure is shared, not the emulator's."""
    from torch_neuronx.coverage.compiled import SHARED, classify_failure

    def add_where(x, mask):
        return x.index_put((mask,), torch.ones((), device=x.device), accumulate=True)

    with pytest.raises(Exception, match="Boolean index_put is not supported") as info:
        torch.compile(add_where, backend="neuron", fullgraph=True)(
            torch.zeros(4, 5, device="neuron"), torch.rand(4, 5, device="neuron") > 0.5)
    assert classify_failure(info.value) | {"error": None} == {"ok": False, "error": None, "cause": SHARED,
                                                              "op": "aten.index_put"}


def test_a_compiled_training_step_writing_and_gathering_by_index_lowers_and_matches_cpu():
    """One graph of each form: a masked write of one value (a where), a write through a slice and
    integers with a broadcast row (a scatter), and gathers whose backward accumulates (a scatter-add)."""
    x = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(8))
    mask = torch.rand(3, 6, 4, generator=torch.Generator().manual_seed(9)) > 0.5
    row = torch.randn(4, generator=torch.Generator().manual_seed(10))
    picked = torch.tensor([5, 0, 5, 2])

    def step(x, mask, row):
        y = x * 2
        y[mask] = -1.0
        y[:, picked[:2]] = row
        return (y[:, picked] * x[:, picked]).square().sum()

    x_dev = x.to("neuron").requires_grad_()
    loss = torch.compile(step, backend="neuron", fullgraph=True)(x_dev, mask.to("neuron"), row.to("neuron"))
    loss.backward()
    x_cpu = x.clone().requires_grad_()
    expected = step(x_cpu, mask, row)
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected.detach())
    torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad)
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert [r["lowering"] for r in records] == ["lowered", "lowered"]


def test_a_tiny_gemma3_compiled_forward_lowers_and_matches_cpu():
    """Gemma 3 writes ``ids[image_mask] = 0`` when its image token lies outside the vocabulary
    (every text-only call), which failed every compiled check before ``index_put`` was decomposed."""
    from torch_neuronx.coverage.probe import differs_from_cpu, logits_of, token_batch
    from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

    model = tiny_causal_lm("gemma3", TinySize(layers=1))
    ids = token_batch(model)
    assert model.config.image_token_id >= model.config.text_config.vocab_size
    compiled = torch.compile(copy.deepcopy(model).to("neuron"), backend="neuron", fullgraph=True)
    assert differs_from_cpu("forward", logits_of(compiled, ids.to("neuron")).cpu(), logits_of(model, ids)) is None
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert records and all(r["lowering"] == "lowered" for r in records)
