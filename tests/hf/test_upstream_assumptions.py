"""Evidence for the upstream tests that pass on cpu and fail on neuron (docs/huggingface.md lists each).

Where it is the test's assumption, the device side is pinned: what the test
computes on neuron is bit-identical to cpu. Where it is a library bug, a strict
xfail pins it, so the day the library changes this file says so.
"""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaModel

# The tiny configuration of Transformers' own causal-LM tester (batch 13 x 7, hidden 32).
CONFIG = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
              intermediate_size=32, hidden_act="gelu", max_position_embeddings=512, pad_token_id=0)


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("use_mask", [True, False])
def test_fp16_eager_and_sdpa_are_bit_identical_to_cpu(padding_side, use_mask):
    """test_eager_matches_sdpa_inference_*_fp16_*: Transformers compares eager with SDPA at atol 1e-7
    for a device missing from its tolerance table (cpu: 5e-3). The neuron outputs of both
    implementations equal cpu's bit for bit, so the eager-vs-SDPA gap is cpu's own."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 99, (13, 7), generator=gen)
    mask = torch.ones_like(ids)
    if padding_side == "left":
        mask[:, :2] = 0
    else:
        mask[:, -2:] = 0
    for attn in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = LlamaModel._from_config(LlamaConfig(**CONFIG), attn_implementation=attn).to(torch.float16).eval()
        kwargs = {"attention_mask": mask} if use_mask else {}
        with torch.no_grad():
            cpu = model(ids, **kwargs).last_hidden_state
            neuron = model.to("neuron")(ids.to("neuron"), **{k: v.to("neuron") for k, v in kwargs.items()})
        assert torch.equal(neuron.last_hidden_state.cpu(), cpu), attn


def _adalora_ranknum(device: str) -> torch.nn.Parameter:
    from peft import AdaLoraConfig, get_peft_model

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 2)).to(device)
    model = get_peft_model(base, AdaLoraConfig(target_modules=["0"], total_step=10))
    return model.base_model.model[0].ranknum["default"]


@pytest.mark.xfail(strict=True, reason="PEFT bug: moving adapter parameters to the base layer's device "
                   "re-wraps frozen ParameterDict entries as trainable (any device but the one they were "
                   "made on; docs/huggingface.md)")
def test_peft_adalora_ranknum_stays_frozen_on_neuron():
    """test_only_params_are_updated[* AdaLoRA *] fails on neuron because AdaLoRA's ``ranknum`` trains."""
    assert _adalora_ranknum("cpu").requires_grad is False  # made on the base layer's device: frozen
    assert _adalora_ranknum("neuron").requires_grad is False


def test_parameterdict_assignment_unfreezes_on_any_other_device():
    """The mechanism, with no neuron involved: ``ParameterDict[k] = p.to(other_device)`` wraps the
    moved tensor in a new Parameter, whose ``requires_grad`` defaults to True."""
    for device, expected in (("cpu", False), ("meta", True)):
        params = torch.nn.ParameterDict({"a": torch.nn.Parameter(torch.ones(1), requires_grad=False)})
        params["a"] = params["a"].to(device)
        assert params["a"].requires_grad is expected


def test_safetensors_cannot_load_straight_to_neuron(tmp_path):
    """test_load_model_low_cpu_mem_usage[* GLoRA *]: PEFT loads the adapter with
    ``safetensors.torch.load_file(path, device="neuron")``; safetensors' device parser knows cuda,
    mps, npu, xpu, xla, mlu, musa, hpu but not PrivateUse1 devices. Loading on cpu and moving works."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save_file

    path = tmp_path / "w.safetensors"
    save_file({"w": torch.arange(4.0)}, path)
    with pytest.raises(SafetensorError, match="device neuron is invalid"):
        load_file(path, device="neuron")
    assert torch.equal(load_file(path)["w"].to("neuron").cpu(), torch.arange(4.0))
