"""FlexAttention on neuron is refused in every mode with a message naming SDPA, which works.

The decision and the real product's behaviour: torch_neuronx/compile/flex_attention.py and
docs/compile.md.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hf_models import cpu_and_neuron, tiny_causal_lm, token_batch
from torch.nn.attention.flex_attention import flex_attention

from torch_neuronx.compile.flex_attention import MESSAGE


def _qkv(device: str):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, 16, 8, generator=gen).to(device) for _ in range(3)]


@pytest.mark.parametrize("mode", ["eager", "compile-neuron", "compile-inductor"])
def test_flex_attention_on_neuron_names_what_to_use(mode):
    q, k, v = _qkv("neuron")
    fn = {"eager": flex_attention,
          "compile-neuron": torch.compile(flex_attention, backend="neuron"),
          "compile-inductor": torch.compile(flex_attention)}[mode]
    with pytest.raises(ValueError) as info:
        fn(q, k, v)
    assert MESSAGE in str(info.value)
    assert "scaled_dot_product_attention" in MESSAGE and "attn_implementation='sdpa'" in MESSAGE


def test_block_mask_on_neuron_names_what_to_use():
    from torch.nn.attention.flex_attention import create_block_mask

    with pytest.raises(ValueError, match="FlexAttention is not supported on the neuron device"):
        create_block_mask(lambda b, h, q, k: q >= k, 1, 1, 16, 16, device="neuron")
    assert create_block_mask(lambda b, h, q, k: q >= k, 1, 1, 16, 16, device="cpu").shape == (1, 1, 16, 16)


def test_cpu_flex_attention_is_untouched():
    q, k, v = _qkv("cpu")
    torch.testing.assert_close(flex_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_transformers_flex_attention_refused_and_sdpa_matches_cpu():
    ids = token_batch()
    flex_cpu, flex_neuron = cpu_and_neuron(tiny_causal_lm("llama", attn="flex_attention"))
    with pytest.raises(ValueError, match="FlexAttention is not supported on the neuron device"):
        flex_neuron(ids.to("neuron"))
    # The replacement the message names: the same weights with SDPA on neuron give the CPU flex logits.
    # Those come from FlexAttention run eagerly (PyTorch's reference implementation of the same
    # attention): Transformers would compile it and its block mask with Inductor's CPU flex
    # template first, PyTorch's code, not ours, and ~35 CPU-s of C++ for one reference.
    sdpa_neuron = tiny_causal_lm("llama", attn="sdpa").to("neuron")
    with torch.no_grad():
        with torch.compiler.set_stance("force_eager"):
            expected = flex_cpu(ids).logits
        got = sdpa_neuron(ids.to("neuron")).logits.cpu()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
