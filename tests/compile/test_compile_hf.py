"""backend="neuron" with Transformers: a training loop, static-cache generate, mixed mode, Trainer.

The Llama tests share two tiny Llama configurations, one to decode (mixed mode: with two layers)
and the coverage sweep's one-layer Llama with eager attention to train, so that graphs compiled by
one test are found in the compile cache by the next (and by the sweep's job).
"""
from __future__ import annotations

import copy
from unittest import mock

import pytest
import torch

import torch_neuronx

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from torch_neuronx.coverage.probe import token_batch  # noqa: E402
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm  # noqa: E402

# Each test compiles a model cold (seconds of Inductor on one core): the module runs in a child
# pytest on the background lane, beside the other tests (tests/conftest.py), in
# make test-compiled-models.
pytestmark = [pytest.mark.slow, pytest.mark.compiled_models, pytest.mark.child_process,
              pytest.mark.usefixtures("fresh_dynamo")]

VOCAB = 256
# Tensors a compiled decode step gets anew each step (token ids, cache and token positions).
NEW_PER_STEP = 3
# One decoder layer: each path is per layer, and every further layer is more kernels to build cold.
ONE_LAYER = TinySize(layers=1)


def _tiny_llama(layers: int, attn_implementation: str | None = None) -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def base_model() -> LlamaForCausalLM:
    """One decoder layer: what these tests check is per layer, and every further layer is more
    kernels to build cold (mixed mode builds two, to see them share a graph)."""
    return _tiny_llama(layers=1)


@pytest.fixture(scope="module")
def training_model() -> LlamaForCausalLM:
    """A one-layer tiny Llama with eager attention, for the tests that train: its backward is
    holds Inductor's prims.fma, which torch-mlir cannot lower, and the training tests then share its graphs.
    It is the coverage sweep's Llama (``torchneuron coverage --only llama --compiled --layers 1``,
    a later job on the background lane: tests/coverage/test_coverage.py), and the training loop feeds it the
    sweep's batch, so the sweep's eager ``compiled_backward`` finds both graphs in the session's
    compile cache. An SDPA backward is still compiled here (GPT-2's dropout test) and in that sweep."""
    return tiny_causal_lm("llama", ONE_LAYER, attn_implementation="eager")


def _train(base, device: str, compiled: bool, steps: int = 3) -> tuple[list[float], dict]:
    """The losses of ``steps`` AdamW steps on the coverage sweep's batch and the first step's
    gradients (on the CPU)."""
    model = copy.deepcopy(base).to(device).train()
    forward = torch.compile(model, backend="neuron", fullgraph=True) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = token_batch(base).to(device)
    losses, first_grads = [], None
    for _ in range(steps):
        loss = forward(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.cpu() for n, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, first_grads


def test_training_loop_matches_eager_neuron_and_cpu(training_model):
    assert training_model.config._attn_implementation == "eager"
    compiled, compiled_grads = _train(training_model, "neuron", compiled=True)
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["graphs_compiled"] == 1 and metrics["recompilations"] == 0
    assert metrics["aot_graphs_compiled"] == 2 and metrics["executions"] == 6
    # Both graphs lower to StableHLO (the backward one once ran torch-mlir out of memory).
    assert [r["lowering"] for r in metrics["compiled_graphs"]] == ["lowered", "lowered"]
    eager, _ = _train(training_model, "neuron", compiled=False)
    cpu, cpu_grads = _train(training_model, "cpu", compiled=False)
    assert compiled[-1] < compiled[0]  # it trains
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled, cpu, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled[0], cpu[0], rtol=1e-4, atol=1e-5)
    for name, want in cpu_grads.items():
        torch.testing.assert_close(compiled_grads[name], want, rtol=1e-3, atol=1e-5, msg=name)


def test_static_cache_generate_uses_compiled_forward(base_model):
    model = copy.deepcopy(base_model).to("neuron")
    prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(2))
    # The static cache of the next test's first request (6 + 6 positions): it finds these graphs
    # in the compile cache instead of compiling its own.
    kwargs = dict(max_new_tokens=6, do_sample=False, cache_implementation="static", pad_token_id=0)
    compiled = model.generate(prompt.to("neuron"), **kwargs)
    metrics = torch_neuronx.get_dynamo_metrics()
    # Transformers picks backend "neuron" itself (CompileConfig for neuron devices): decode steps share a graph.
    assert metrics["graphs_compiled"] >= 1 and metrics["executions"] >= 2
    eager = base_model.generate(prompt, **kwargs, disable_compile=True)
    assert compiled.device.type == "neuron"
    assert torch.equal(compiled.cpu(), eager)


def test_warm_compiled_decode_steps_alias_no_parameter_or_cache_tensor_again(base_model):
    """A compiled decode step takes every parameter and static-cache tensor as an
    input; each further step reuses their CPU aliases and builds new ones only for the step's
    new tensors (tensors made once per generate() call are aliased on its first step)."""
    from torch_neuronx.compile.aliased_execution import input_alias_counts

    model = copy.deepcopy(base_model).to("neuron")
    prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(4))

    def generate(tokens: int) -> tuple[int, dict]:
        runs = torch_neuronx.get_dynamo_metrics()["executions"]
        input_alias_counts(reset=True)
        out = model.generate(prompt.to("neuron"), max_new_tokens=tokens, min_new_tokens=tokens,
                             do_sample=False, cache_implementation="static", pad_token_id=0)
        expected = base_model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens,
                                       do_sample=False, cache_implementation="static",
                                       pad_token_id=0, disable_compile=True)
        assert torch.equal(out.cpu(), expected)
        return torch_neuronx.get_dynamo_metrics()["executions"] - runs, input_alias_counts()

    generate(6)  # compiles the decode step for a cache of 6 + 6 positions, which shorter requests reuse
    runs_short, short = generate(3)
    runs_long, long = generate(6)
    steps = runs_long - runs_short
    assert steps == 3
    assert long["built"] - short["built"] == steps * NEW_PER_STEP
    persistent = len(list(model.parameters())) + 2 * model.config.num_hidden_layers  # + keys, values
    assert long["reused"] - short["reused"] >= steps * persistent


def _decode_step_host_buffers(base, device: str, backend: str) -> tuple[int, torch.Tensor, list]:
    """A static-cache prefill (eager: only its cache contents matter) then one decode step,
    compiled by ``backend`` without graph caches: the host buffers the decode graph's generated code
    allocates, its logits and the cache after it."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor.graph import GraphLowering
    from transformers import StaticCache

    model = copy.deepcopy(base).to(device)
    cache = StaticCache(config=model.config, max_cache_len=12)
    forward = torch.compile(model, backend=backend, dynamic=False)
    prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(8)).to(device)
    codes: list[str] = []
    # Without the graph caches, so Inductor generates the code; its compiled C++ may come from the cache.
    with torch.no_grad(), inductor_config.patch(fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        token = model(input_ids=prompt, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        with mock.patch.object(GraphLowering, "save_output_code", codes.append):
            logits = forward(input_ids=token, past_key_values=cache, use_cache=True).logits
    (code,) = codes  # the decode step's graph, the only one compiled
    return (code.count("empty_strided_cpu("), logits.cpu(),
            [t.cpu() for layer in cache.layers for t in (layer.keys, layer.values)])


def test_compiled_decode_step_allocates_no_more_host_buffers_than_inductor_on_cpu(base_model):
    """The decode graph backend="neuron" runs on the host allocates no more buffers than Inductor's
    for the same step on CPU, and gives its logits and cache: the static cache is updated in place
    (compile/scatter_reinplace.py), not copied, scattered and copied back per layer and step."""
    from torch._inductor.fx_passes import reinplace

    cpu_buffers, cpu_logits, cpu_cache = _decode_step_host_buffers(base_model, "cpu", "inductor")
    neuron_buffers, logits, cache = _decode_step_host_buffers(base_model, "neuron", "neuron")
    assert 0 < neuron_buffers <= cpu_buffers, (neuron_buffers, cpu_buffers)
    torch.testing.assert_close(logits, cpu_logits, rtol=1e-5, atol=1e-5)
    for got, want in zip(cache, cpu_cache, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.ops.aten.scatter.src not in reinplace.inplaceable_ops  # scoped to our compile


def test_mixed_mode_compiles_only_the_chosen_submodules():
    cpu_model = _tiny_llama(layers=2).train()
    model = copy.deepcopy(cpu_model).to("neuron").train()
    for layer in model.model.layers:
        layer.mlp = torch.compile(layer.mlp, backend="neuron", fullgraph=True)
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(3))
    loss = model(input_ids=ids.to("neuron"), labels=ids.to("neuron")).loss
    loss.backward()
    ref = cpu_model(input_ids=ids, labels=ids).loss
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref, rtol=1e-4, atol=1e-5)
    grad = model.model.layers[0].mlp.gate_proj.weight.grad
    torch.testing.assert_close(grad.cpu(), cpu_model.model.layers[0].mlp.gate_proj.weight.grad, rtol=1e-3, atol=1e-5)
    metrics = torch_neuronx.get_dynamo_metrics()
    # Only the MLPs went through the compiler: one graph (layers share the code, their weights are
    # graph inputs), run forward and backward once per layer.
    assert metrics["graphs_compiled"] == 1
    assert metrics["executions"] == 2 * len(model.model.layers)
    assert "(2, 16, 64) torch.float32 neuron:0" in metrics["graphs"][0]["inputs"]


def test_trainer_with_torch_compile_selects_neuron_backend(training_model, tmp_path):
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    ids = torch.randint(0, VOCAB, (8, 16), generator=torch.Generator().manual_seed(4))
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})

    def run(torch_compile: bool):
        args = TrainingArguments(
            output_dir=str(tmp_path / str(torch_compile)), per_device_train_batch_size=2, max_steps=3,
            learning_rate=1e-2, logging_steps=1, report_to=[], save_strategy="no", seed=0,
            torch_compile=torch_compile, dataloader_pin_memory=False,
        )
        trainer = Trainer(model=copy.deepcopy(training_model).train(), args=args, train_dataset=data)
        trainer.train()
        return trainer, [h["loss"] for h in trainer.state.log_history if "loss" in h]

    trainer, compiled_losses = run(True)
    assert trainer.args.torch_compile_backend == "neuron"
    assert next(trainer.model.parameters()).device.type == "neuron"
    assert torch_neuronx.get_dynamo_metrics()["graphs_compiled"] >= 1
    _, eager_losses = run(False)
    assert len(compiled_losses) == 3
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-3, atol=1e-3)


# With graph lowering on by default, eager attention's backward (Inductor's prims.fma) and
# sliding-window / MoE static-cache decoding (fmod.Scalar, unsorted topk) need their rewrites to
# compile. One architecture per code path, each against the same computation on CPU (Qwen2's
# attention is Llama's eager_attention_forward with biased q/k/v projections: Llama's case covers it).
# Llama's eager-attention training step is the training loop's first (test_training_loop_...).
NO_DROPOUT = {"gpt2": {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}}  # masks differ by RNG


# Falcon (multi_query=True, its tiny config's default): its key/value heads are picked by a list
# index, whose backward Inductor 2.13 compiled wrong on CPU (compile/tile2d_atomic_add.py).
# Mamba (its causal conv1d's backward; its scan's saved activations reach the backward graph with
# strides a view cannot take) is checked by the compiled coverage sweep, not here: ≈ 60 s of Inductor.
@pytest.mark.parametrize("model_type", ["gpt2", "falcon"])
def test_compiled_training_step_with_eager_attention_matches_cpu(model_type):
    reference = tiny_causal_lm(model_type, ONE_LAYER, attn_implementation="eager",
                               **NO_DROPOUT.get(model_type, {})).train()
    assert model_type != "falcon" or reference.config.multi_query
    model = copy.deepcopy(reference).to("neuron")
    ids = torch.randint(3, 200, (2, 16), generator=torch.Generator().manual_seed(5))
    compiled = torch.compile(model, backend="neuron")
    loss = compiled(input_ids=ids.to("neuron"), labels=ids.to("neuron")).loss
    loss.backward()
    expected = reference(input_ids=ids, labels=ids).loss
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-3, atol=1e-5, msg=name)
    lowering = [r["lowering"] for r in torch_neuronx.get_dynamo_metrics()["compiled_graphs"]]
    assert lowering and set(lowering) == {"lowered"}


# One decoder layer each: GLM-4-MoE's first layer is dense by default (first_k_dense_replace=1),
# so it starts with MoE instead of building a second layer to reach one.
ONE_LAYER_OVERRIDES = {"mistral": {"sliding_window": 8}, "glm4_moe": {"first_k_dense_replace": 0}}


@pytest.mark.parametrize("model_type", ["mistral", "glm4_moe"])
def test_static_cache_generate_compiles_sliding_window_and_moe_routing(model_type):
    reference = tiny_causal_lm(model_type, ONE_LAYER, **ONE_LAYER_OVERRIDES[model_type])
    assert model_type != "glm4_moe" or type(reference.model.layers[0].mlp).__name__ == "Glm4MoeMoE"
    model = copy.deepcopy(reference).to("neuron")
    prompt = torch.randint(3, 200, (1, 12), generator=torch.Generator().manual_seed(6))
    kwargs = dict(max_new_tokens=4, do_sample=False, cache_implementation="static")
    compiled = model.generate(prompt.to("neuron"), **kwargs)
    expected = reference.generate(prompt, **kwargs, disable_compile=True)
    assert torch.equal(compiled.cpu(), expected)
    lowering = [r["lowering"] for r in torch_neuronx.get_dynamo_metrics()["compiled_graphs"]]
    assert lowering and set(lowering) == {"lowered"}


def test_compiled_training_with_dropout_lowers_its_random_masks_as_inputs():
    """GPT-2 trains with dropout 0.1: Inductor's partitioner fuses the graph's seeds (it needs
    the fake mode Inductor sets) and its random draws enter the StableHLO as inputs, as the
    real product passes a dropout mask drawn on the host (torchneuron-source-2026-04.md §8,
    "The compiled dropout mask comes from CPU aten.native_dropout and is passed in as an extra
    input", TR neuron_dynamo_backend/utils/stablehlo_utils.py:122-134)."""
    model = tiny_causal_lm("gpt2", ONE_LAYER).train().to("neuron")
    assert model.config.resid_pdrop > 0
    ids = torch.randint(3, 200, (2, 16), generator=torch.Generator().manual_seed(7)).to("neuron")
    loss = torch.compile(model, backend="neuron")(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss.cpu()) and all(torch.isfinite(p.grad.cpu()).all() for p in model.parameters())
    records = torch_neuronx.get_dynamo_metrics()["compiled_graphs"]
    assert len(records) >= 2 and {r["lowering"] for r in records} == {"lowered"}
