"""``torchneuron plan MODEL``: per-rank HBM, compilations, projected step time and cost of a
layout, without allocating the model. See docs/plan.md."""
from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from torch_neuronx.plan import Layout, Planner
    from torch_neuronx.plan.html import render_html
    from torch_neuronx.plan.render import show, show_sweep, write_json

    planner = Planner(args.model, args.instance, args.seq_len, "infer" if args.infer else "train", args.dtype,
                      args.decode_tokens, args.price_per_hour)
    lnc = args.lnc or planner.profile.default_lnc
    layout = Layout(args.tp, args.fsdp, args.batch_size, args.activation_checkpointing, lnc, args.instances)
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
                       "and cost of a TP × FSDP layout. Exit code 2 on bad input.")
    p.add_argument("model", help="a config.json, a checkpoint directory, or a bundled config "
                                 "(llama-3-8b, llama-3-70b, qwen2.5-7b)")
    p.add_argument("--instance", default="trn2.48xlarge", help="instance type (default trn2.48xlarge)")
    p.add_argument("--instances", type=int, default=1, help="number of instances (default 1)")
    p.add_argument("--lnc", type=int, default=None, help="logical NeuronCore config (default: the instance's)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--fsdp", type=int, default=1, help="FSDP degree (default 1)")
    p.add_argument("--seq-len", type=int, default=2048, help="sequence length (default 2048)")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per FSDP rank (default 1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--train", action="store_true", help="one training step (default)")
    mode.add_argument("--infer", action="store_true", help="prefill plus --decode-tokens decode steps")
    p.add_argument("--decode-tokens", type=int, default=128, help="decode steps with --infer (default 128)")
    p.add_argument("--dtype", default="bf16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each decoder layer")
    p.add_argument("--price-per-hour", type=float, default=None, help="USD per instance-hour (default: price table)")
    p.add_argument("--sweep", action="store_true", help="rank fitting TP × FSDP × batch layouts by cost per token")
    p.add_argument("--out", default="plan.json", help="where to write the plan (default plan.json; the page goes beside it as .html)")
    p.set_defaults(func=run)
