"""Set-up shared by the compile tests."""
import pytest
import torch
import torch._dynamo

import torch_neuronx


@pytest.fixture
def fresh_dynamo():
    """Fresh Dynamo state and metrics; the backend's static-shape switch does not leak to other
    tests. Opt-in (``pytest.mark.usefixtures("fresh_dynamo")``): tests that compile nothing need
    no reset."""
    config = torch._dynamo.config
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    with config.patch(
        automatic_dynamic_shapes=config.automatic_dynamic_shapes,
        assume_static_by_default=config.assume_static_by_default,
    ):
        yield
    torch._dynamo.reset()
