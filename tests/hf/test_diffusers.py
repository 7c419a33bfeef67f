"""Diffusers, unchanged: denoiser on ``neuron``, text encoders on CPU (examples/diffusion_tp.py)."""
from __future__ import annotations

import pytest
import torch

import diffusion_tp  # examples/diffusion_tp.py (hf/conftest.py puts examples/ on sys.path)
from hf_models import run_example

SIZE, STEPS = 32, 3


@pytest.fixture(scope="module")
def cpu_image():
    return diffusion_tp.generate(diffusion_tp.tiny_pipeline(), "a red bicycle", SIZE, SIZE, STEPS, seed=0)


def test_split_pipeline_matches_all_cpu(cpu_image):
    """Transformer and VAE on ``neuron``, CLIP and T5 on CPU: every denoising step
    runs on the device and the image equals the all-CPU pipeline's."""
    pipe = diffusion_tp.place(diffusion_tp.tiny_pipeline(), "neuron:0", tp_degree=1)
    assert pipe.transformer.device.type == "neuron" and pipe.vae.device.type == "neuron"
    assert pipe.text_encoder.device.type == "cpu" and pipe.text_encoder_2.device.type == "cpu"
    assert pipe.device.type == "neuron"  # Diffusers reports the accelerator of a split pipeline
    seen = []
    pipe.transformer.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append(kwargs["hidden_states"].device.type), with_kwargs=True)
    image = diffusion_tp.generate(pipe, "a red bicycle", SIZE, SIZE, STEPS, seed=0)
    assert seen == ["neuron"] * STEPS
    assert image.shape == cpu_image.shape == (1, 3, SIZE, SIZE)
    torch.testing.assert_close(image.cpu(), cpu_image, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_example_tensor_parallel_denoiser_matches_cpu(cpu_image, tmp_path):
    """examples/diffusion_tp.py under torchrun: 2-way TP denoiser over the ``neuron``
    process group produces the all-CPU image (8-way at full size)."""
    out = tmp_path / "image.pt"
    stdout = run_example("diffusion_tp.py", "--prompt", "a red bicycle", "--height", str(SIZE), "--width",
                         str(SIZE), "--steps", str(STEPS), "--output", str(out), nproc=2)
    assert "(tp=2)" in stdout and "text encoders: cpu" in stdout
    torch.testing.assert_close(torch.load(out), cpu_image, rtol=1e-4, atol=1e-4)
