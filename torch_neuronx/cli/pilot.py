"""``torchneuron pilot [MODEL]``: the migration pilot as one command with a report.

See docs/pilot.md for the steps, the report schema and the exit codes.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def config_from_args(args: argparse.Namespace):
    from torch_neuronx.pilot import PilotConfig

    return PilotConfig(
        model=getattr(args, "model", None), device=args.device, dtype=args.dtype, attn_implementation=args.attn,
        batch_size=args.batch_size, seq_lens=args.seq_lens, gen_tokens=args.gen_tokens, mode=args.mode,
        train_steps=args.train_steps, optimizer=args.optimizer, lr_schedule=args.lr_schedule,
        iters=args.iters, hidden_states=not args.no_hidden_states,
        instance=args.instance, price_per_hour=args.price_per_hour, hbm_per_core_gib=args.hbm_per_core,
        out=Path(args.out), inputs=Path(args.inputs) if args.inputs else None, seed=args.seed,
    )


def run(args: argparse.Namespace, environment_error=None) -> int:
    """The pilot; with an ``environment_error`` (``main.environment_error``) only its error report."""
    from torch_neuronx.pilot import run_pilot
    from torch_neuronx.pilot.console import PilotConsole

    return run_pilot(config_from_args(args), PilotConsole(), environment_error)


def add_parser(sub) -> None:
    from torch_neuronx.cli.options import Lengths
    from torch_neuronx.pilot.config import LR_SCHEDULES, OPTIMIZERS, PilotConfig

    d = PilotConfig()
    p = sub.add_parser(
        "pilot",
        help="run the migration pilot on a model and write report.json + report.html",
        description="Known inputs, numerics and output quality vs CPU, checkpoint round trip, "
        "compilation, performance and cost, in one report. Exit code: 0 all checks passed, "
        "1 a check failed, 2 bad input, 3 internal error.",
    )
    # SUPPRESS: a MODEL written after --seq-lens' lengths is set by that option (options.Lengths)
    p.add_argument("model", nargs="?", default=argparse.SUPPRESS,
                   help="local Transformers causal-LM checkpoint directory (default: built-in tiny Llama)")
    p.add_argument("--device", default=d.device, help="any PyTorch device: neuron (default), cpu, cuda, cuda:1 …")
    p.add_argument("--dtype", default=d.dtype,
                   help="float32 (default, or fp32), bfloat16 (bf16) or float16 (fp16)")
    p.add_argument("--attn", default=d.attn_implementation, help="attention implementation: sdpa (default) or eager")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"prompts per batch (default {d.batch_size})")
    p.add_argument("--seq-lens", action=Lengths, default=d.seq_lens, metavar="N",
                   help="prompt lengths, one compiled shape each: 32 64 or 32,64 (default "
                        f"{' '.join(map(str, d.seq_lens))})")
    p.add_argument("--gen-tokens", type=int, default=d.gen_tokens, help=f"new tokens per request (default {d.gen_tokens})")
    p.add_argument("--mode", default=d.mode, choices=("eager", "compile", "both"),
                   help="eager (default: TorchNeuron's default execution mode, minutes on 2 host cores), "
                        "compile (torch.compile backend=neuron; adds about a minute per shape here) or both")
    p.add_argument("--train-steps", type=int, default=d.train_steps,
                   help=f"short fine-tune steps on device and CPU, 0 to skip (default {d.train_steps})")
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS,
                   help=f"optimizer of the fine-tune (default {d.optimizer})")
    p.add_argument("--lr-schedule", default=d.lr_schedule, choices=LR_SCHEDULES,
                   help="learning-rate schedule of the fine-tune: constant (default), or linear / cosine, which "
                        "change the rate every step (SGD then recompiles its update on Trainium every step)")
    p.add_argument("--iters", type=int, default=d.iters,
                   help=f"timed requests per shape, the first one cold (default {d.iters})")
    p.add_argument("--no-hidden-states", action="store_true", help="skip the per-layer error (forward hooks)")
    p.add_argument("--instance", default=None,
                   help="instance profile (default: TORCHNEURON_INSTANCE or trn2.3xlarge; any case)")
    p.add_argument("--price-per-hour", type=float, default=None,
                   help="USD per instance-hour for the cost step (default: the instance's dated entry in "
                        "the projection's price table, if any)")
    p.add_argument("--hbm-per-core", type=float, default=None, metavar="GIB",
                   help="emulate NeuronCores with this much HBM (what-if; default: the profile's)")
    p.add_argument("--out", default=str(d.out), help=f"output directory (default {d.out})")
    p.add_argument("--inputs", default=None, help="reuse the known inputs of an earlier report (its inputs.json)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the built-in model's weights")
    p.set_defaults(func=run, on_config_error=run)
