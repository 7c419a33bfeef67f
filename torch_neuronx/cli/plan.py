"""``torchneuron plan MODEL``: per-rank HBM, compilations, projected step time and cost of a
layout, without allocating the model; ``--validate``: the projection against AWS's published
Trainium results. See docs/plan.md."""
from __future__ import annotations

import argparse
from pathlib import Path


def _validate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from torch_neuronx.plan.validate import validate

    doc = Path(args.docs) if args.docs else None
    _, _, markdown = validate(retrace=args.retrace, doc=doc)
    print(markdown)
    if doc is not None:
        Console().print(f"wrote the table into {doc}")
    return 0


def _layout(args: argparse.Namespace, planner):
    from torch_neuronx.plan import Layout
    from torch_neuronx.runtime.errors import ConfigError

    if args.fsdp is not None:
        if args.dp is not None and args.dp != args.fsdp or args.shard not in (None, "fsdp"):
            raise ConfigError("--fsdp F means --dp F --shard fsdp: give one or the other")
        dp, shard = args.fsdp, "fsdp"
    else:
        dp, shard = args.dp or 1, args.shard or "fsdp"
    batch = args.micro_batch if args.micro_batch is not None else args.batch_size
    lnc = args.lnc or planner.profile.default_lnc
    return Layout(args.tp, dp, batch, args.activation_checkpointing, lnc, args.instances, pp=args.pp,
                  shard=shard, global_batch=args.global_batch, sequence_parallel=args.sequence_parallel)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from torch_neuronx.plan import Planner
    from torch_neuronx.plan.html import render_html
    from torch_neuronx.plan.render import show, show_sweep, write_json
    from torch_neuronx.runtime.errors import ConfigError

    if args.validate:
        return _validate(args)
    if args.model is None:
        raise ConfigError("plan needs a MODEL (or --validate)")
    seq_len = args.input_len if args.infer and args.input_len is not None else args.seq_len
    planner = Planner(args.model, args.instance, seq_len, "infer" if args.infer else "train",
                      args.precision or args.dtype or "bf16", args.output_len, args.price_per_hour, args.mode)
    layout = _layout(args, planner)
    console = Console()
    plan = planner.plan(layout)
    show(plan, console)
    if args.sweep:
        plan["sweep"] = planner.sweep(layout)
        show_sweep(plan["sweep"], console)
    out = Path(args.out)
    write_json(plan, out)
    page = out.with_suffix(".html")
    page.write_text(render_html(plan), encoding="utf-8")
    console.print(f"wrote {out} and {page}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="size a training or inference job on Trainium without allocating it",
                       description="Per-rank HBM, first-run compilations, projected step time, tokens/s, MFU "
                       "and cost of a TP × PP × DP layout (training) or TTFT and time per output token "
                       "(inference), in compiled or eager mode. Exit code 2 on bad input.")
    p.add_argument("model", nargs="?", help="a config.json, a checkpoint directory, or a bundled config "
                                            "(llama-3-8b, llama-3.1-70b, bert-large-uncased, ...)")
    p.add_argument("--instance", default="trn2.48xlarge", help="instance type (default trn2.48xlarge)")
    p.add_argument("--instances", type=int, default=1, help="number of instances (default 1)")
    p.add_argument("--lnc", type=int, default=None, help="logical NeuronCore config (default: the instance's)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages, 1F1B schedule (default 1)")
    p.add_argument("--dp", type=int, default=None, help="data-parallel degree (default 1)")
    p.add_argument("--shard", choices=("fsdp", "zero1", "none"), default=None,
                   help="what data parallelism shards: fsdp (parameters, gradients, optimizer state), "
                        "zero1 (optimizer state), none (default fsdp)")
    p.add_argument("--fsdp", type=int, default=None, help="same as --dp F --shard fsdp")
    p.add_argument("--seq-len", type=int, default=2048, help="training sequence length (default 2048)")
    p.add_argument("--micro-batch", type=int, default=None, help="sequences per data-parallel rank per micro-step")
    p.add_argument("--global-batch", type=int, default=None,
                   help="sequences per optimizer step; must be a multiple of micro-batch × dp "
                        "(default: micro-batch × dp, no accumulation)")
    p.add_argument("--batch-size", type=int, default=1,
                   help="inference: sequences in the batch; training: same as --micro-batch (default 1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--train", action="store_true", help="one training step (default)")
    mode.add_argument("--infer", action="store_true", help="prefill of --input-len, then --output-len decode steps")
    mode.add_argument("--validate", action="store_true",
                      help="project AWS's published Trainium results, fit the physical factors, print the "
                           "leave-one-out error and write the table into --docs")
    p.add_argument("--input-len", type=int, default=None, help="prompt tokens with --infer (default --seq-len)")
    p.add_argument("--output-len", "--decode-tokens", dest="output_len", type=int, default=128,
                   help="output tokens with --infer (default 128)")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp32", "autocast-bf16"), default=None,
                   help="bf16 (default), fp16, fp32, or autocast-bf16 (fp32 master weights and optimizer "
                        "state, bf16 compute)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None, help="same as --precision")
    p.add_argument("--mode", choices=("compile", "eager"), default="compile",
                   help="compile: one graph per forward, backward, optimizer step, prefill, decode "
                        "(default); eager: one kernel launch per op")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="split the hidden-state elementwise work (norms, residuals) over the TP group")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each decoder layer")
    p.add_argument("--price-per-hour", type=float, default=None, help="USD per instance-hour (default: price table)")
    p.add_argument("--sweep", action="store_true",
                   help="rank fitting TP × DP × micro-batch layouts by cost per token")
    p.add_argument("--out", default="plan.json", help="where to write the plan (default plan.json; the page goes beside it as .html)")
    p.add_argument("--retrace", action="store_true", help="with --validate: trace the published rows again")
    p.add_argument("--docs", default="docs/projection.md",
                   help="with --validate: the document whose generated section gets the table "
                        "(default docs/projection.md; '' to skip)")
    p.set_defaults(func=run)
