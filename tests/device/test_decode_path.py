"""Static-cache decoding on neuron: it gives CPU's tokens, and every
op it runs takes the unboxed fast path (csrc/aten/FastPathRoutes.cpp) or is listed
below with the reason it does not."""
import torch

import torch_neuronx
from torch_neuronx.testing.tiny_models import tiny_causal_lm

# Ops a static-cache generate() still runs through the boxed fallback, and why.
BOXED_IN_DECODE = {
    "aten::contiguous": "not an op that runs here: the real product's contiguity kernel, only counted",
}


def _generate(model, prompt):
    return model.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                          cache_implementation="static", pad_token_id=0)


def test_static_cache_decode_runs_every_op_on_the_fast_path_or_says_why():
    model = tiny_causal_lm("llama")
    model.generation_config.disable_compile = True  # eager, the path this test is about
    prompt = torch.randint(3, 512, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = _generate(model, prompt)
        model.to("neuron")
        _generate(model, prompt.to("neuron"))  # first request: builds the cache
        torch_neuronx.reset_metrics()
        got = _generate(model, prompt.to("neuron"))
    assert torch.equal(got.cpu(), expected)
    per_op = torch_neuronx.metrics()["kernels"]["per_op"]
    fast = set(torch_neuronx._C._fast_path_ops())
    assert fast & set(per_op), "no kernel was counted: is kernel accounting on?"
    boxed = sorted(op for op in per_op if op not in fast)
    unexplained = [op for op in boxed if op not in BOXED_IN_DECODE]
    assert not unexplained, f"ops of a static-cache decode step on the boxed fallback: {unexplained}"
    assert not fast & set(BOXED_IN_DECODE), "listed as boxed but registered on the fast path"
