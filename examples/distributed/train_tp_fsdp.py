"""Tensor parallel × fully sharded data parallel training of a tiny Llama on ``neuron``.

The layout: TP=4 inside a Trainium2 chip (4 logical cores at LNC=2),
FSDP across chips. Half a trn2.48xlarge is 8 chips = 32 logical cores:

    TORCHNEURON_INSTANCE=trn2.48xlarge torchrun --nproc-per-node 32 \\
        examples/distributed/train_tp_fsdp.py --tp 4
    torchrun --nproc-per-node 8 examples/distributed/train_tp_fsdp.py --tp 4   # CI size

One process per logical NeuronCore; every rank uses ``neuron:LOCAL_RANK``.
The validation recipe of the real product (same job on CPU/gloo, compare):
``--compare-cpu`` reruns the job on CPU tensors over plain gloo groups in the
same processes and reports the largest loss difference; ``--device cpu`` runs
only the CPU job.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

# Megatron-style split of a Llama decoder layer: column-parallel in, row-parallel out.
LLAMA_TP_PLAN = {
    "self_attn.q_proj": ColwiseParallel, "self_attn.k_proj": ColwiseParallel,
    "self_attn.v_proj": ColwiseParallel, "self_attn.o_proj": RowwiseParallel,
    "mlp.gate_proj": ColwiseParallel, "mlp.up_proj": ColwiseParallel,
    "mlp.down_proj": RowwiseParallel,
}


def tiny_llama(device, hidden: int = 64, layers: int = 2, heads: int = 4, vocab: int = 96,
               seed: int = 0):
    """A Llama small enough that 32 ranks fit in a few GiB of host RAM."""
    from torch_neuronx.testing.tiny_models import TinySize, tiny_causal_lm

    size = TinySize(hidden=hidden, layers=layers, heads=heads, kv_heads=heads, intermediate=2 * hidden,
                    vocab=vocab, positions=128)
    return tiny_causal_lm("llama", size, seed, "eager", tie_word_embeddings=False).train().to(device)


def tp_fsdp(model, mesh):
    """TP over ``mesh['tp']`` inside each decoder layer, then FSDP over ``mesh['dp']``
    (inner layers first, then the root; FSDP is applied once per module)."""
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], {k: style() for k, style in LLAMA_TP_PLAN.items()})
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def batches(dp_rank: int, steps: int, batch: int, seq: int, vocab: int):
    """Learnable synthetic text: counting sequences ``s, s+1, ...`` (mod vocab) from
    random starts, different per data-parallel replica, equal on its TP ranks."""
    g = torch.Generator().manual_seed(1000 + dp_rank)
    return [(torch.randint(0, vocab, (batch, 1), generator=g) + torch.arange(seq)) % vocab
            for _ in range(steps)]


def train(model, data, device, mesh, log: bool) -> list[float]:
    """AdamW steps; returns the loss per step averaged over data-parallel replicas."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    losses = []
    for step, ids in enumerate(data):
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        logged = loss.detach().clone()  # the mean over replicas, as a trainer logs it
        dist.all_reduce(logged, op=dist.ReduceOp.SUM, group=mesh["dp"].get_group())
        losses.append(logged.item() / mesh["dp"].size())
        if log:
            print(f"step {step}: loss {losses[-1]:.4f}", flush=True)
    return losses


def max_param_difference(model, reference) -> float:
    """Largest |difference| between the updated parameter shards of two runs, over all ranks."""
    worst = torch.zeros(())
    for p, q in zip(model.parameters(), reference.parameters()):
        worst = torch.maximum(worst, (p.to_local().cpu() - q.to_local()).abs().max())
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return worst.item()


def memory_mib() -> dict:
    """Peak RSS, and the proportional/private set size now: RSS counts the shared
    torch libraries in full in every rank, PSS shares them out fairly."""
    out = {"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("Pss", "Private_Dirty"):
                    out[key.lower()] = int(value.split()[0]) / 1024
    except OSError:  # not Linux
        pass
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tp", type=int, default=4, help="tensor-parallel degree (within a chip)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=2, help="sequences per data-parallel replica")
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--device", choices=["neuron", "cpu"], default="neuron")
    p.add_argument("--compare-cpu", action="store_true",
                   help="also run the job on CPU/gloo and report the largest loss difference")
    p.add_argument("--checkpoint", help="save the sharded model here with torch.distributed.checkpoint")
    p.add_argument("--report", help="write a JSON summary (rank 0)")
    args = p.parse_args(argv)

    start = time.perf_counter()
    dist.init_process_group("neuron" if args.device == "neuron" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.tp:
        raise SystemExit(f"world size {world} is not a multiple of --tp {args.tp}")
    device = (torch.device("neuron", int(os.environ.get("LOCAL_RANK", 0)))
              if args.device == "neuron" else torch.device("cpu"))
    mesh = init_device_mesh(args.device, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))

    vocab = 96
    data = batches(mesh["dp"].get_local_rank(), args.steps, args.batch, args.seq, vocab)
    model = tp_fsdp(tiny_llama(device, args.hidden, args.layers, vocab=vocab), mesh)
    setup_s = time.perf_counter() - start
    step_start = time.perf_counter()
    losses = train(model, data, device, mesh, log=rank == 0)
    train_s = time.perf_counter() - step_start

    if args.checkpoint:
        import torch.distributed.checkpoint as dcp

        dcp.save(model.state_dict(), checkpoint_id=args.checkpoint)

    cpu_losses = None
    if args.compare_cpu and args.device == "neuron":
        cpu_mesh = init_device_mesh("cpu", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"),
                                    backend_override={"dp": "gloo", "tp": "gloo"})
        cpu_model = tp_fsdp(tiny_llama("cpu", args.hidden, args.layers, vocab=vocab), cpu_mesh)
        cpu_losses = train(cpu_model, data, "cpu", cpu_mesh, log=False)
        param_diff = max_param_difference(model, cpu_model)

    mem = [None] * world
    dist.all_gather_object(mem, memory_mib())
    summary = {
        "device": args.device, "world_size": world, "tp": args.tp, "dp": world // args.tp,
        "instance": os.environ.get("TORCHNEURON_INSTANCE", "trn2.3xlarge"),
        "losses": losses, "setup_s": round(setup_s, 2), "train_s": round(train_s, 2),
        "tokens_per_s": round(args.steps * args.batch * args.seq * (world // args.tp) / train_s, 1),
    }
    if cpu_losses is not None:
        summary["cpu_losses"] = cpu_losses
        summary["max_loss_diff_vs_cpu"] = max(abs(a - b) for a, b in zip(losses, cpu_losses))
        summary["max_param_diff_vs_cpu"] = param_diff
    for key in mem[0]:
        values = [m[key] for m in mem]
        summary[f"{key}_mib_max"] = round(max(values), 1)
        summary[f"{key}_mib_mean"] = round(sum(values) / world, 1)
    if rank == 0:
        print(json.dumps(summary), flush=True)
        if args.report:
            with open(args.report, "w") as f:
                json.dump(summary, f, indent=2)
    dist.destroy_process_group()
    return summary


if __name__ == "__main__":
    main()
