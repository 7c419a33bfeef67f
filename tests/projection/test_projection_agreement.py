"""One tiny job, one set of projected figures: ``metrics()["projection"]``, the pilot's
training projection and cost step, the benchmark row and the plan's trace give the same
compile seconds, step seconds and dollars, because each displays the projector's typed
results instead of recomputing them."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

import torch_neuronx
from torch_neuronx import projection as P
from torch_neuronx.accounting import projected
from torch_neuronx.pilot.steps import compilation, cost, performance
from torch_neuronx.testing.decoding import cache_argument

transformers = pytest.importorskip("transformers")

PRICE = 7.2  # USD per instance-hour, given as a user would


def _tiny_llama():
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    return cfg, transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                              attn_implementation="sdpa")


@pytest.fixture
def job(tmp_path, own_neff_cache):
    """One training step (forward + backward) of a tiny Llama on the neuron device, with an
    empty NEFF cache (a first run), read by every consumer of the projection. Both resets: the
    projection's compile seconds count the graphs compiled since ``reset_dynamo_metrics()``, and
    a test before this one may have compiled some."""
    from benchmarks.adapters import _Projecting

    cfg, model = _tiny_llama()
    model = model.to("neuron").train()
    ids = torch.randint(0, cfg.vocab_size, (2, 16)).to("neuron")
    with own_neff_cache(tmp_path / "neff"):
        torch_neuronx.reset_metrics()
        torch_neuronx.reset_dynamo_metrics()
        try:
            bench = _Projecting()
            bench_mark, pilot_mark = bench.projection_mark(), projected.mark()
            model(input_ids=ids, labels=ids).loss.backward()
            torch.neuron.synchronize()
            yield {"cfg": cfg, "metrics": torch_neuronx.metrics(), "section": projected.section(1, PRICE),
                   "bench": bench.projected(bench_mark), "pilot_window": projected.since(pilot_mark)}
        finally:
            torch_neuronx.reset_metrics()


def test_metrics_pilot_and_benchmarks_show_the_same_compile_step_and_dollars(job):
    projector = P.get_projector()
    section = job["section"]
    step_s, compile_s, usd = section["step"]["seconds"], section["compile"]["seconds"], section["cost"]["total_usd"]
    assert step_s > 0 and compile_s > 0 and usd > 0
    # by hand: the run priced at PRICE, compile hours included; compile = the one model over its kernels
    assert usd == pytest.approx((step_s + compile_s) * PRICE / 3600)
    model = P.compile_model()
    assert compile_s == pytest.approx(section["compile"]["eager_kernels"] * model.program_seconds(1))
    # metrics() itself (default: no user price) shows the same step and compile figures
    shown = job["metrics"]["projection"]
    assert (shown["step"]["seconds"], shown["compile"]["seconds"]) == (step_s, compile_s)
    # a first run compiles every signature: the fidelity estimate (this run's misses) agrees
    assert job["metrics"]["estimated_compile_seconds"] == pytest.approx(compile_s)

    # the pilot: the fine-tune projection and the cost step's training run display the same figures
    window = job["pilot_window"]
    training = performance.project_training(window, 1, 2, projector, PRICE)
    assert training["seconds_per_step"] == step_s and training["compile"]["seconds"] == compile_s
    assert training["cost"]["total_usd"] == pytest.approx(usd)
    perf = performance.PerformanceResult(projected_training=training)
    result = cost.run(cost.price_for("neuron", PRICE, projector.device.instance), "emulated", 1, "neuron",
                      compilation.CompilationResult(), perf, None, projector=projector, user_price=PRICE)
    run = result.projected["training_run"]
    assert (run["run_seconds"], run["compile_seconds"]) == (step_s, compile_s)
    assert run["total_usd"] == pytest.approx(usd)

    # the benchmark row: one step's projected seconds and dollars, the compile of the first step
    bench = job["bench"]
    assert bench["cost"].step_seconds == step_s
    assert bench["cost"].run_usd == pytest.approx(projector.cost(step_s).run_usd)
    assert projector.cost(step_s, 1, PRICE).run_usd == pytest.approx(step_s * PRICE / 3600)


# --- the plan's trace against the device path ------------------------------------------------------
# The plan traces on fake tensors, which launch nothing; what it counts must be what the eager
# device counts for the same work. The real product's rules (ARCHITECTURE.md, "How the real product
# is cited"): views launch no kernel (TR csrc/core/NeuronBindings.cpp:170-229); a strided input is made
# contiguous by its own kernel first (NeuronBindings.cpp:87-140) and an empty input compiles nothing
# (python_ops/torch_mlir/kernel.py:818-844); a kernel's key is its shapes and dtypes, static arguments
# by value (torch_neuronx/kernels/base.py:103-160).

def _tiny_gpt2():
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return cfg, transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                              attn_implementation="sdpa")


def _device_calls(run) -> Counter:
    """Signature → calls of what ``run()`` launched on the neuron device (a fresh count)."""
    torch_neuronx.reset_metrics()
    run()
    torch.neuron.synchronize()
    projected.project_pending()  # projects the signatures met
    return Counter(torch_neuronx._C._signature_calls())


def _per_op(projector, calls) -> dict[str, tuple[int, int]]:
    """Op → (calls, signatures)."""
    rows: dict[str, list[int]] = {}
    for key, n in calls.items():
        row = rows.setdefault(projector.kernels[key].op, [0, 0])
        row[0] += n
        row[1] += 1
    return {op: tuple(r) for op, r in rows.items()}


def _eager_compile_seconds(projector, calls) -> float:
    return projector.compile(eager_kernels=len(calls), graphs=()).seconds


@pytest.fixture
def clean_metrics():
    torch_neuronx.reset_metrics()
    yield
    torch_neuronx.reset_metrics()


@pytest.mark.parametrize("build", [_tiny_llama, _tiny_gpt2], ids=["llama", "gpt2"])
def test_the_plan_trace_projects_the_same_inference_as_the_device(build, clean_metrics):
    """The context encoding and one decode step into a static cache: the trace counts the
    device's signatures and calls exactly, op by op, so step seconds and compile seconds agree."""
    from transformers import StaticCache

    from torch_neuronx.plan.trace import Workload, trace

    cfg, model = build()
    model = model.to("neuron").eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 16)).to("neuron")
    with torch.no_grad():
        name = cache_argument(model)
        prefill = _device_calls(lambda: model(input_ids=ids, use_cache=True))
        step = {"input_ids": ids[:, :1], "use_cache": True, name: StaticCache(config=model.config, max_cache_len=24)}
        model(**step, cache_position=torch.tensor([16], device="neuron"))  # allocates the cache, unrecorded
        decode = _device_calls(lambda: model(**step, cache_position=torch.tensor([16], device="neuron")))
    device = prefill + decode
    projector = P.get_projector()
    traced = trace(cfg, Workload("infer", 1, 2, 16, torch.float32, max_len=24), projector)
    calls = +(traced.graph_calls("prefill") + traced.graph_calls("decode"))
    assert _per_op(projector, calls) == _per_op(projector, device)
    assert len(calls) == len(device) and sum(calls.values()) == sum(device.values())
    assert projector.step(calls).seconds == pytest.approx(projector.step(device).seconds, rel=1e-12)
    assert _eager_compile_seconds(projector, calls) == _eager_compile_seconds(projector, device)


@pytest.mark.parametrize("build, mask_adds", [(_tiny_llama, 0), (_tiny_gpt2, 2)], ids=["llama", "gpt2"])
def test_the_plan_trace_projects_the_same_training_step_as_the_device(build, mask_adds, clean_metrics):
    """Forward and backward: the trace counts the device's signatures and calls exactly, op by
    op, the autograd engine's in-place gradient sums (``add_``) included, so step and compile
    seconds agree (before ``gradient_sums`` the trace saw every sum as ``add``: tiny Llama 57
    signatures against the device's 59). One split is left: with attention dropout (GPT-2) the
    device runs PyTorch's math attention, which adds its mask in place when no tensor is a
    subclass (``attention.cpp``, ``areAnyTensorSubclassLike``); the traced composite takes the
    ``add`` branch. One signature each side, the same work: ``mask_adds`` calls (one per layer)."""
    from torch_neuronx.plan.trace import Workload, trace

    cfg, model = build()
    model = model.to("neuron").train()
    ids = torch.randint(0, cfg.vocab_size, (2, 16)).to("neuron")
    device = _device_calls(lambda: model(input_ids=ids, labels=ids).loss.backward())
    projector = P.get_projector()
    traced = trace(cfg, Workload("train", 1, 2, 16, torch.float32), projector)
    calls = +(traced.graph_calls("forward") + traced.graph_calls("backward"))
    on_device, in_trace = _per_op(projector, device), _per_op(projector, calls)
    in_place, added = on_device.pop("aten::add_.Tensor"), on_device.pop("aten::add.Tensor")
    assert in_place[0] > mask_adds  # the engine sums gradients in place on the device
    moved = (mask_adds, int(mask_adds > 0))
    assert in_trace.pop("aten::add_.Tensor") == (in_place[0] - moved[0], in_place[1] - moved[1])
    assert in_trace.pop("aten::add.Tensor") == (added[0] + moved[0], added[1] + moved[1])
    assert in_trace == on_device
    assert len(calls) == len(device) and sum(calls.values()) == sum(device.values())
    assert projector.step(calls).seconds == pytest.approx(projector.step(device).seconds, rel=1e-12)
    assert _eager_compile_seconds(projector, calls) == _eager_compile_seconds(projector, device)


class _GappedGradient(torch.autograd.Function):
    """The identity, whose gradient is a fresh tensor with a gap between rows: not dense."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        rows, cols = grad.shape
        return torch.empty_strided((rows, cols), (2 * cols, 1), dtype=grad.dtype, device=grad.device).copy_(grad)


def _gradient_sums(x, w):
    """A backward meeting each case of the engine's in-place test (``projection/gradient_sums.py``).
    Nodes made later run first."""
    d = x.exp()
    a = x * w
    b = a.sin() + a.cos() + a.exp()  # three fresh gradients of ``a``: summed in place
    c = b + b  # one gradient handed to both uses of ``b``: summed out of place
    e = c.sin()
    h = torch.cat([c, d])  # ``c``'s share of cat's gradient is a view (its base holds the storage)
    v = x * 4
    v_cos = v.cos()
    gapped = _GappedGradient.apply(v)  # arrives before ``v.cos()``'s: fresh, but not dense
    k = x * 5
    k_cos = k.cos()
    k_flat = k.view(32) * 2  # ``k``'s gradient through the view arrives first: a view (its base holds the storage)
    return e.sum() + h.sum() + x.sum() + v_cos.sum() + gapped.sum() + k_cos.sum() + k_flat.sum()


def _traced_gradient_sums(projector) -> Counter:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), torch.device("neuron"):
        x, w = (torch.randn(4, 8, requires_grad=True) for _ in range(2))
        with P.ProjectionMode(projector) as mode:
            mode.backward(_gradient_sums(x, w))
    return mode.calls


def test_the_trace_sums_gradients_in_place_exactly_where_the_engine_does(clean_metrics, monkeypatch):
    """Against the device's own engine: the traced backward counts ``add_`` for exactly the sums
    the engine runs in place on ``neuron`` tensors. The graph has sums of both kinds, and each
    clause of the test decides one of them: summing every one in place, or none, or ignoring
    density or views, miscounts."""
    import dataclasses

    from torch_neuronx.projection import gradient_sums

    x, w = (torch.randn(4, 8, device="neuron", requires_grad=True) for _ in range(2))
    device = _device_calls(lambda: _gradient_sums(x, w).backward())
    projector = P.get_projector()
    on_device = _per_op(projector, device)
    assert _per_op(projector, _traced_gradient_sums(projector)) == on_device
    read = gradient_sums._Gradient.of

    def reading(**fields):
        return staticmethod(lambda t: dataclasses.replace(read(t), **fields))

    mutants = {"every sum in place": (gradient_sums, "_in_place", lambda *_: True),
               "no sum in place": (gradient_sums, "_in_place", lambda *_: False),
               "density ignored": (gradient_sums._Gradient, "of", reading(plain_dense=True)),
               "views ignored": (gradient_sums._Gradient, "of", reading(view=False))}
    for name, (owner, attribute, mutant) in mutants.items():
        with monkeypatch.context() as patch:
            patch.setattr(owner, attribute, mutant)
            assert _per_op(projector, _traced_gradient_sums(projector)) != on_device, name


def test_the_plan_shows_the_training_figures_the_pilot_and_metrics_show(job):
    """The fourth figure: the plan's trace of the job's training step gives the step and compile
    seconds ``metrics()``, the pilot and the benchmark row show (the test above)."""
    from torch_neuronx.plan.trace import Workload, trace

    projector = P.get_projector()
    traced = trace(job["cfg"], Workload("train", 1, 2, 16, torch.float32), projector)
    calls = +(traced.graph_calls("forward") + traced.graph_calls("backward"))
    section = job["section"]
    assert projector.step(calls).seconds == pytest.approx(section["step"]["seconds"], rel=1e-12)
    assert section["compile"]["eager_kernels"] == len(calls)
    assert _eager_compile_seconds(projector, calls) == section["compile"]["seconds"]


def test_the_plan_trace_counts_the_casts_the_compiled_graph_holds():
    """The casts the eager device runs without a kernel are the compiled graph's: a bf16 Llama's
    prefill traced by the plan counts the dtype-changing ``_to_copy`` nodes of the same forward
    captured by ``torch.compile`` (AOTAutograd), one for one and byte for byte. (Its StableHLO holds
    more ``convert``s: those torch-mlir emits inside other ops' lowerings, SiLU computed in f32,
    in registers of that op's kernel.)"""
    from torch._dynamo.backends.common import aot_autograd

    from torch_neuronx.plan.trace import Workload, trace

    cfg, _ = _tiny_llama()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    graphs = []

    def capture(gm, _inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(lambda ids: model(input_ids=ids, use_cache=True).logits,
                      backend=aot_autograd(fw_compiler=capture))(torch.zeros(2, 16, dtype=torch.long))
    torch._dynamo.reset()
    casts = [(n.args[0].meta["val"], n.meta["val"]) for gm in graphs for n in gm.graph.nodes
             if n.target is torch.ops.aten._to_copy.default and n.args[0].meta["val"].dtype != n.meta["val"].dtype]
    cast_bytes = sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in casts)
    assert casts

    projector = P.Projector("trn2.3xlarge", calibration=P.defaults())
    traced = trace(cfg, Workload("infer", 1, 2, 16, torch.bfloat16, max_len=17), projector)
    converts = traced.graph_converts("prefill")
    assert sum(converts.values()) == len(casts)
    assert sum(projector.kernels[k].bytes * n for k, n in converts.items()) == cast_bytes
