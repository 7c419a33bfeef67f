"""FlexAttention on neuron: compiled (the neuron backend decomposes it into ATen ops, as the real
product's compile path does), it trains and matches CPU; called eagerly it is refused with a message
naming what works. The decision and the real product's behaviour: torch_neuronx/compile/flex_attention.py
and docs/compile.md, "FlexAttention".

Its compiled tests compile cold (about 30 CPU-s), so the module runs on the background lane
(``child_process``, tests/README.md).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hf_models import cpu_and_neuron, tiny_causal_lm, token_batch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.checkpoint import checkpoint

import torch_neuronx
from torch_neuronx.compile.flex_attention import MESSAGE

pytestmark = pytest.mark.child_process


def _qkv(device: str, requires_grad: bool = False):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, 16, 8, generator=gen).to(device).requires_grad_(requires_grad)
            for _ in range(3)]


def _causal(b, h, q, k):
    return q >= k


def test_eager_flex_attention_on_neuron_names_what_to_use():
    q, k, v = _qkv("neuron")
    with pytest.raises(ValueError) as info:
        flex_attention(q, k, v)
    assert MESSAGE in str(info.value)
    assert "torch.compile" in MESSAGE and "attn_implementation='sdpa'" in MESSAGE


def test_compiled_flex_attention_trains_on_neuron_as_sdpa_on_cpu():
    """The default backend, 'inductor', which compiles neuron graphs with the neuron backend:
    causal FlexAttention inside an activation-checkpointed region (a subgraph of the graph, as
    TorchTitan's blocks are), its output and gradients against CPU's causal SDPA, and no graph
    left to fall back."""
    expected_qkv = _qkv("cpu", requires_grad=True)
    expected = F.scaled_dot_product_attention(*expected_qkv, is_causal=True)
    expected.sum().backward()
    mask = create_block_mask(_causal, 1, None, 16, 16, device="neuron")
    q, k, v = _qkv("neuron", requires_grad=True)
    torch_neuronx.reset_dynamo_metrics()

    def checkpointed(q, k, v):
        return checkpoint(flex_attention, q, k, v, block_mask=mask, use_reentrant=False)

    out = torch.compile(checkpointed)(q, k, v)
    out.sum().backward()
    assert torch_neuronx.get_dynamo_metrics()["fallbacks"] == []
    torch.testing.assert_close(out.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    for got, ref in zip((q, k, v), expected_qkv):
        torch.testing.assert_close(got.grad.cpu(), ref.grad, rtol=1e-5, atol=1e-5)


def test_cpu_flex_attention_is_untouched():
    q, k, v = _qkv("cpu")
    torch.testing.assert_close(flex_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_transformers_flex_attention_matches_cpu():
    """Transformers compiles flex_attention and its block mask with the default backend: on neuron
    that is the neuron backend, and the logits are CPU's FlexAttention's (run eagerly there:
    PyTorch's reference implementation of the same attention)."""
    ids = token_batch()
    flex_cpu, flex_neuron = cpu_and_neuron(tiny_causal_lm("llama", attn="flex_attention"))
    with torch.no_grad():
        with torch.compiler.set_stance("force_eager"):
            expected = flex_cpu(ids).logits
        got = flex_neuron(ids.to("neuron")).logits.cpu()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
