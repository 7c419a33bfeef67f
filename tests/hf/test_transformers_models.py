"""Transformers causal LMs, unchanged, on ``neuron``: every result is checked against CPU."""
from __future__ import annotations

import threading

import pytest
import torch

from hf_models import FAMILIES, cpu_and_neuron, tiny_causal_lm, token_batch

ALL_FAMILIES = list(FAMILIES)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_forward_backward_match_cpu(family, attn):
    cpu, dev = cpu_and_neuron(tiny_causal_lm(family, attn))
    ids = token_batch()
    out_cpu = cpu(ids, labels=ids)
    out_dev = dev(ids.to("neuron"), labels=ids.to("neuron"))
    assert out_dev.logits.device == torch.device("neuron:0")
    torch.testing.assert_close(out_dev.logits.cpu(), out_cpu.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out_dev.loss.cpu(), out_cpu.loss, rtol=1e-4, atol=1e-5)
    out_cpu.loss.backward()
    out_dev.loss.backward()
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters()):
        assert p_dev.grad.device.type == "neuron", name
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_generate_greedy_sampling_and_static_cache(family):
    """Greedy and seeded sampling reproduce CPU token for token; the static cache
    (run eagerly here; the compiled path is test_examples.py::test_inference_static_cache_example)
    gives the same tokens as the dynamic one."""
    cpu, dev = cpu_and_neuron(tiny_causal_lm(family))
    ids = token_batch(length=8)
    kw = dict(max_new_tokens=6, pad_token_id=0)
    greedy_cpu = cpu.generate(ids, do_sample=False, **kw)
    greedy_dev = dev.generate(ids.to("neuron"), do_sample=False, **kw)
    assert greedy_dev.device.type == "neuron"
    assert torch.equal(greedy_dev.cpu(), greedy_cpu)

    torch.manual_seed(123)
    sample_cpu = cpu.generate(ids, do_sample=True, top_k=20, **kw)
    torch.manual_seed(123)
    sample_dev = dev.generate(ids.to("neuron"), do_sample=True, top_k=20, **kw)
    assert torch.equal(sample_dev.cpu(), sample_cpu)

    static_dev = dev.generate(
        ids.to("neuron"), do_sample=False, cache_implementation="static", disable_compile=True, **kw
    )
    assert torch.equal(static_dev.cpu(), greedy_cpu)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_bf16_matches_cpu_bf16(family):
    cpu, dev = cpu_and_neuron(tiny_causal_lm(family).to(torch.bfloat16))
    ids = token_batch()
    logits_cpu = cpu(ids).logits
    logits_dev = dev(ids.to("neuron")).logits
    assert logits_dev.dtype == torch.bfloat16
    torch.testing.assert_close(logits_dev.cpu(), logits_cpu, rtol=2e-2, atol=2e-2)
    greedy = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(dev.generate(ids.to("neuron"), **greedy).cpu(), cpu.generate(ids, **greedy))


def test_from_pretrained_skips_allocator_warmup_on_neuron(tmp_path):
    """Transformers warms its caching allocator up only on cuda and xpu, so not on
    ``neuron``: over the whole load the device allocates the weights once (each in
    its rounded block), where a warm-up would first allocate (and free) a block as
    large again."""
    from transformers import AutoModelForCausalLM

    tiny_causal_lm("llama").save_pretrained(tmp_path)
    before = torch.neuron.memory_stats().get("allocated_bytes.all.allocated", 0)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="neuron")
    weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    allocated = torch.neuron.memory_stats()["allocated_bytes.all.allocated"] - before
    assert weight_bytes <= allocated < 1.5 * weight_bytes


@pytest.mark.parametrize("async_load", [True, False], ids=["threaded", "HF_DEACTIVATE_ASYNC_LOAD"])
@pytest.mark.parametrize("family", ["qwen3", "gpt_neox"])
def test_save_pretrained_round_trip(family, async_load, tmp_path, monkeypatch):
    """save_pretrained -> from_pretrained(device_map="neuron") is bit exact, with
    Transformers' default thread-pool loader and with it switched off."""
    import transformers.core_model_loading as loading
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "0" if async_load else "1")
    loader_threads: set[str] = set()
    real_materialize = loading._materialize_copy

    def recording_materialize(*args, **kwargs):
        loader_threads.add(threading.current_thread().name)
        return real_materialize(*args, **kwargs)

    monkeypatch.setattr(loading, "_materialize_copy", recording_materialize)
    reference = tiny_causal_lm(family)
    reference.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="neuron")

    main = threading.current_thread().name
    assert loader_threads, "the loader did not materialise any tensor"
    assert (loader_threads != {main}) == async_load, loader_threads
    ref_state = reference.state_dict()
    for name, value in loaded.state_dict().items():
        assert value.device == torch.device("neuron:0"), name
        assert torch.equal(value.cpu(), ref_state[name]), name
    ids = token_batch().to("neuron")
    _, reference_on_device = cpu_and_neuron(reference)
    assert torch.equal(loaded(ids).logits, reference_on_device(ids).logits)


def test_from_pretrained_wrong_device_index_is_a_clear_error(tmp_path):
    from transformers import AutoModelForCausalLM

    tiny_causal_lm("llama").save_pretrained(tmp_path)
    bad = torch.neuron.device_count()
    with pytest.raises(RuntimeError, match=rf"Invalid neuron device index {bad}.*logical NeuronCore"):
        AutoModelForCausalLM.from_pretrained(tmp_path, device_map=f"neuron:{bad}")


def test_python_indexing_mixing_slices_and_index_lists():
    """``x[:, [-1, 0]]`` (Transformers' padding check) hands the device fallback
    undefined tensors for the sliced dimension; regression for the fix in
    csrc/aten/native/CpuFallback.cpp."""
    x = torch.arange(20).reshape(2, 10)
    d = x.to("neuron")
    assert torch.equal(d[:, [-1, 0]].cpu(), x[:, [-1, 0]])
    assert torch.equal(d[:, torch.tensor([3, 1])].cpu(), x[:, torch.tensor([3, 1])])
    assert torch.equal(d[..., torch.tensor([2]).to("neuron")].cpu(), x[..., torch.tensor([2])])
    assert (0 in d[:, [-1, 0]]) and (5 not in d[:, [-1, 0]])
