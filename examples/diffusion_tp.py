"""Text-to-image with the denoiser on ``neuron`` and the text encoders on CPU.

A Flux pipeline from Diffusers, unchanged: the transformer (denoiser) and the VAE
run on the ``neuron`` device, the CLIP and T5 text encoders stay on the host CPU,
and the resolution and step count are fixed so every denoising step has the
same shapes (one compilation per shape on Trainium). Under ``torchrun`` the
denoiser is tensor parallel over all ranks through Diffusers' own
``TensorParallelConfig`` and the ``neuron`` process group.

Here (emulated cores, a tiny pipeline built from config classes)::

    python examples/diffusion_tp.py                       # one core
    torchrun --nproc_per_node 2 examples/diffusion_tp.py  # 2-way TP denoiser

On a trn2.48xlarge with a real checkpoint (8-way TP, 1024x1024, 40 steps)::

    torchrun --nproc_per_node 8 examples/diffusion_tp.py \\
        --model black-forest-labs/FLUX.1-dev --height 1024 --width 1024 --steps 40 --dtype bfloat16
"""
from __future__ import annotations

import argparse
import os
import time

import torch


def tiny_pipeline():
    """A Flux pipeline small enough to run in seconds, built offline from configs."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from torch_neuronx.testing.tiny_models import byte_tokenizer

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8],
    )
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
        projection_dim=32, max_position_embeddings=77, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    ))
    t5 = T5EncoderModel(T5Config(
        vocab_size=128, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, pad_token_id=0, eos_token_id=2,
    ))
    vae = AutoencoderKL(
        sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
        latent_channels=1, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
        shift_factor=0.0609, scaling_factor=1.5035,
    )
    return FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=clip,
                        tokenizer=byte_tokenizer(128, 77), text_encoder_2=t5,
                        tokenizer_2=byte_tokenizer(128, 77), transformer=transformer)


def place(pipe, device: str, tp_degree: int):
    """Denoiser (optionally tensor parallel) and VAE on ``device``; text encoders stay on CPU."""
    if tp_degree > 1:
        from diffusers import TensorParallelConfig

        # Diffusers' neuron path shards the planned weights from CPU straight onto
        # each rank's core; the layers outside the plan (embedders, norms) follow.
        pipe.transformer.enable_parallelism(config=TensorParallelConfig(tp_degree=tp_degree))
    pipe.transformer.to(device)
    pipe.vae.to(device)
    return pipe


def generate(pipe, prompt: str, height: int, width: int, steps: int, seed: int):
    """One image (as a float tensor in [0, 1], NCHW) from ``prompt``."""
    return pipe(
        prompt, height=height, width=width, num_inference_steps=steps, guidance_scale=3.5,
        max_sequence_length=16, generator=torch.Generator("cpu").manual_seed(seed), output_type="pt",
    ).images


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="Flux checkpoint (directory or Hub id); default: a tiny pipeline")
    parser.add_argument("--prompt", default="a lighthouse at dusk")
    parser.add_argument("--height", type=int, default=32)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--output", help="where to save the image tensor (torch.save), rank 0 only")
    args = parser.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        torch.distributed.init_process_group("neuron")
    rank = torch.distributed.get_rank() if world > 1 else 0
    device = f"neuron:{torch.neuron.current_device()}"

    if args.model:
        from diffusers import FluxPipeline

        pipe = FluxPipeline.from_pretrained(args.model, torch_dtype=getattr(torch, args.dtype))
    else:
        pipe = tiny_pipeline().to(getattr(torch, args.dtype))
    place(pipe, device, world)

    start = time.perf_counter()
    image = generate(pipe, args.prompt, args.height, args.width, args.steps, args.seed)
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"denoiser: {pipe.transformer.device} (tp={world}); text encoders: {pipe.text_encoder.device}")
        print(f"image {tuple(image.shape)} in {elapsed:.2f}s ({args.steps} steps, {args.height}x{args.width})")
        if args.output:
            torch.save(image.cpu(), args.output)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
