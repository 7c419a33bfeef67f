"""``torch.profiler`` on a compiled training step: one projected device event per graph run.

The step is ``test_compile_hf.py``'s training loop (the coverage sweep's one-layer Llama with
eager attention, the sweep's batch, ``fullgraph=True``), so its two graphs are found in the
session's compile cache when that module ran first on the background lane, as it does.
"""
from __future__ import annotations

import pytest
import torch

from profiler_checks import check_profile, profile_step
from torch_neuronx.coverage.probe import token_batch
from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

# A whole model compiled (cold when run alone): in make test-compiled-models, in a child pytest on
# the background lane (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.compiled_models, pytest.mark.child_process]


def test_compiled_training_step_has_one_projected_device_event_per_graph_run(tmp_path):
    model = tiny_causal_lm("llama", TinySize(layers=1), attn_implementation="eager").to("neuron").train()
    forward = torch.compile(model, backend="neuron", fullgraph=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = token_batch(model).to("neuron")

    def step():
        forward(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    step()  # compiles the forward and backward graphs
    seen = profile_step(step, tmp_path)
    check_profile(seen, graphs_expected=True)
    assert seen["reference"]["graphs"] == 2  # the forward and the backward graph, run once each
    graph_events = [e for e in seen["device"] if e.name.startswith("graph ")]
    # each graph run is linked to the autograd node that ran it
    linked = {e.name for e in seen["prof"].events() if any(k.name.startswith("graph ") for k in e.kernels)}
    assert linked == {"CompiledFunction", "CompiledFunctionBackward"}, linked
    assert all(e.time_range.elapsed_us() > 0 for e in graph_events)
