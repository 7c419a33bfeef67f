"""Supervised fine-tuning with TRL's ``SFTTrainer`` on ``neuron`` with TP x FSDP.

Transformers loads the model already sharded (``DistributedConfig``: tensor
parallel inside a group of cores, FSDP2 across groups) over the ``neuron``
process group; ``SFTTrainer`` then trains it as it is: Trainer reads the mesh
from the model and hands Accelerate a matching ``ParallelismConfig``, so the
model is *not* sharded a second time. Sequences are packed to ``--max-length``
tokens and TRL pads every batch to a multiple of 128 on ``neuron`` (one
compilation per shape on Trainium). As in the product's instructions:
automatic dynamic shapes are off and Transformers' threaded weight loading is
off (``HF_DEACTIVATE_ASYNC_LOAD=1``).

Here (emulated cores, a tiny Qwen3 written to ``--output-dir`` first)::

    torchrun --nproc_per_node 4 examples/sft_tp_fsdp.py --tp 2 --fsdp 2 --max-steps 2

Full size: 8 Trainium2 chips = 32 logical NeuronCores (LNC2), TP 4 inside a
chip and FSDP 8 across chips::

    torchrun --nproc_per_node 32 examples/sft_tp_fsdp.py --model Qwen/Qwen3-8B \\
        --tp 4 --fsdp 8 --max-length 2048 --bf16 --dataset trl-lib/Capybara
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_DEACTIVATE_ASYNC_LOAD", "1")

import torch  # noqa: E402


def write_tiny_checkpoint(path: str):
    """Rank 0 saves a tiny Qwen3 + tokenizer so every rank can load it sharded."""
    from torch_neuronx.testing.tiny_models import QWEN3_EXAMPLE, byte_tokenizer, tiny_qwen3

    tiny_qwen3().save_pretrained(path)
    byte_tokenizer(QWEN3_EXAMPLE.vocab).save_pretrained(path)


class BatchShapes:
    """Forward pre-hook recording the ``input_ids`` shape of every step."""

    def __init__(self, model):
        self.shapes: list[tuple[int, ...]] = []
        model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.shapes.append(tuple(ids.shape))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="checkpoint directory or Hub id; default: a tiny Qwen3")
    parser.add_argument("--dataset", help="Hub dataset with a 'text' or 'messages' column; default: synthetic")
    parser.add_argument("--tp", type=int, default=2, help="tensor parallel degree (cores per group)")
    parser.add_argument("--fsdp", type=int, default=2, help="FSDP degree (groups)")
    parser.add_argument("--max-length", type=int, default=2048, help="packed sequence length")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--output-dir", default="sft-tp-fsdp-output")
    args = parser.parse_args(argv)

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.distributed import DistributedConfig
    from trl import SFTConfig, SFTTrainer

    torch._dynamo.config.automatic_dynamic_shapes = False
    dist.init_process_group("neuron")
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != args.tp * args.fsdp:
        raise SystemExit(f"--tp {args.tp} x --fsdp {args.fsdp} needs {args.tp * args.fsdp} ranks, got {world}")

    model_path = args.model
    if model_path is None:
        model_path = os.path.join(args.output_dir, "tiny-qwen3")
        if rank == 0:
            write_tiny_checkpoint(model_path)
        dist.barrier()

    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        dtype=torch.bfloat16 if args.bf16 else torch.float32,
        distributed_config=DistributedConfig(tp_size=args.tp, fsdp_size=args.fsdp),
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if args.dataset:
        from datasets import load_dataset

        dataset = load_dataset(args.dataset, split="train")
    else:
        from torch_neuronx.testing.tiny_models import random_text_dataset

        dataset = random_text_dataset(64, 20, 300)

    config = SFTConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=1,
        learning_rate=1e-3,
        packing=True,
        max_length=args.max_length,
        bf16=args.bf16,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    shapes = BatchShapes(model)
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()

    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    mesh = trainer.accelerator.torch_device_mesh
    q_proj = trainer.model.get_parameter("model.layers.0.self_attn.q_proj.weight")
    if rank == 0:
        print(f"ranks {world}: tp={args.tp} x fsdp={args.fsdp}; device {trainer.args.device}; "
              f"mesh {dict(zip(mesh.mesh_dim_names, mesh.shape)) if mesh is not None else None}")
        print(f"q_proj: {q_proj.device_mesh.mesh_dim_names} {q_proj.placements}")
        print(f"pad_to_multiple_of={config.pad_to_multiple_of}; batch shapes {shapes.shapes}")
        print(f"losses {losses}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
