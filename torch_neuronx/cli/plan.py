"""``torchneuron plan MODEL``: per-rank HBM, compilations, projected step time and cost of a
layout, without allocating the model. See docs/plan.md.

Every argument is checked before any work (:func:`check_arguments`, :func:`check_outputs`):
a bad one is one line and exit 2. The outputs are staged and published whole, so an error,
a full disk or an interrupt (exit 130 / 143) leaves the previous plan intact.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

# Upper bounds, so a typo is one line instead of an overflow deep in the trace: 16 Mi tokens
# is above the longest published context window (10 M) and far past any core's HBM, and
# keeping tokens per rank (batch × sequence) under it keeps the traced [batch, heads, seq,
# seq] attention scores inside int64 sizes.
MAX_SEQ_LEN = 2**24
MAX_TOKENS_PER_RANK = 2**24


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ConfigError`` for a flag value (or calibration file) no plan can use,
    before the model is read. Extend it when adding a flag."""
    from torch_neuronx.projection import active_calibration
    from torch_neuronx.runtime.errors import ConfigError
    from torch_neuronx.runtime.profiles import PROFILES

    active_calibration()  # TORCHNEURON_PROJECTION_CALIBRATION, read now rather than after the trace
    if args.instance not in PROFILES:
        raise ConfigError(f"--instance {args.instance!r} is not a known instance profile; "
                          f"choose one of {', '.join(PROFILES)}")
    price = args.price_per_hour
    if price is not None and not (math.isfinite(price) and price > 0):
        raise ConfigError(f"--price-per-hour must be a positive, finite number of USD (got {price})")
    for flag, value in (("--seq-len", args.seq_len), ("--decode-tokens", args.decode_tokens)):
        if value > MAX_SEQ_LEN:
            raise ConfigError(f"{flag} {value:,} is above the limit of {MAX_SEQ_LEN:,} tokens "
                              "(longer than any published context window)")
    if args.batch_size * args.seq_len > MAX_TOKENS_PER_RANK:
        raise ConfigError(f"--batch-size {args.batch_size:,} × --seq-len {args.seq_len:,} is above the limit of "
                          f"{MAX_TOKENS_PER_RANK:,} tokens per rank per step")


def _model_config_file(model: str) -> Path | None:
    path = Path(model)
    return path / "config.json" if path.is_dir() else path if path.is_file() else None


def check_outputs(args: argparse.Namespace) -> list[Path]:
    """The files this run will write, each checked now: ``--out``, plus the page beside it
    when ``--out`` ends in ``.json``. Never the model's config; never a file another tool
    wrote unless ``--force``; always in a directory that can be written."""
    from torch_neuronx.plan.html import is_plan_page
    from torch_neuronx.plan.render import is_plan_json
    from torch_neuronx.runtime.errors import ConfigError
    from torch_neuronx.runtime.staged_files import unwritable_reason

    out = Path(args.out)
    targets = [out] + ([out.with_suffix(".html")] if out.suffix.lower() == ".json" else [])
    source = _model_config_file(args.model)
    for target, recognised in zip(targets, (is_plan_json, is_plan_page)):
        what = "--out" if target is out else f"the page beside --out, {target},"
        if source is not None and target.resolve() == source.resolve():
            raise ConfigError(f"{what} {target} is the model config being planned: plan never writes over its "
                              "input; choose another --out")
        problem = unwritable_reason(target)
        if problem:
            raise ConfigError(f"{what} {target} {problem}")
        if target.exists() and not args.force and not recognised(target):
            raise ConfigError(f"{what} {target} exists and was not written by torchneuron plan; pass --force "
                              "to replace it, or choose another --out")
    return targets


def _warn_past_context(planner, args: argparse.Namespace) -> None:
    context = getattr(planner.config, "max_position_embeddings", None)
    tokens = args.seq_len + (args.decode_tokens if args.infer else 0)
    if context and tokens > context:
        print(f"warning: {tokens:,} tokens per sequence is past the model's context of {context:,} "
              "(max_position_embeddings): the plan extrapolates a length the model was not built for",
              file=sys.stderr)


def _previous(targets: list[Path]) -> str:
    """What an interrupted or failed run leaves, for its one-line message."""
    kept = [str(t) for t in targets if t.exists()]
    return f"{' and '.join(kept)} kept as before" if kept else "nothing written"


def _publish(plan: dict, targets: list[Path], files) -> None:
    """Stage every output in ``files`` (a ``StagedFiles``), then publish them together; an
    OSError leaves the previous ones."""
    from torch_neuronx.plan.html import render_html
    from torch_neuronx.plan.render import json_text
    from torch_neuronx.runtime.errors import ConfigError

    texts = [json_text(plan)]  # strict JSON first: a non-finite figure fails before anything is staged
    if len(targets) > 1:
        texts.append(render_html(plan, json_name=targets[0].name))
    try:
        for target, text in zip(reversed(targets), reversed(texts)):  # the page first, the JSON last
            files.write_text(target, text)
        files.publish()
    except OSError as exc:
        raise ConfigError(f"cannot write {exc.filename}: {exc.strerror or exc}; {_previous(targets)}") from None


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from torch_neuronx.plan import Layout, Planner
    from torch_neuronx.plan.render import show, show_sweep
    from torch_neuronx.runtime.interrupts import interrupt_signal
    from torch_neuronx.runtime.staged_files import StagedFiles

    check_arguments(args)
    targets = check_outputs(args)
    written = " and ".join(map(str, targets))
    with StagedFiles() as files:
        try:  # SIGTERM arrives as an interrupt too (cli/main.py)
            planner = Planner(args.model, args.instance, args.seq_len, "infer" if args.infer else "train",
                              args.dtype, args.decode_tokens, args.price_per_hour)
            lnc = args.lnc or planner.profile.default_lnc
            layout = Layout(args.tp, args.fsdp, args.batch_size, args.activation_checkpointing, lnc,
                            args.instances)
            planner.check(layout)
            _warn_past_context(planner, args)
            console = Console()
            plan = planner.plan(layout)
            show(plan, console)
            if args.sweep:
                plan["sweep"] = planner.sweep(layout)
                show_sweep(plan["sweep"], console)
            _publish(plan, targets, files)
            console.print(f"wrote {written}")
        except KeyboardInterrupt as exc:  # held back while publishing, so either before it or after
            signum = interrupt_signal(exc)
            outcome = f"{written} already written" if files.published else _previous(targets)
            print(f"error: interrupted by {signum.name}; {outcome}", file=sys.stderr)
            return 128 + signum
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="size a training or inference job on Trainium without allocating it",
                       description="Per-rank HBM, first-run compilations, projected step time, tokens/s, MFU "
                       "and cost of a TP × FSDP layout. Exit code 2 on bad input; 130 / 143 when "
                       "interrupted by SIGINT / SIGTERM (the previous plan is kept).")
    p.add_argument("model", help="a config.json, a checkpoint directory, or a bundled config "
                                 "(llama-3-8b, llama-3-70b, qwen2.5-7b)")
    p.add_argument("--instance", default="trn2.48xlarge", help="instance type (default trn2.48xlarge)")
    p.add_argument("--instances", type=int, default=1, help="number of instances (default 1)")
    p.add_argument("--lnc", type=int, default=None, help="logical NeuronCore config (default: the instance's)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--fsdp", type=int, default=1, help="FSDP degree (default 1)")
    p.add_argument("--seq-len", type=int, default=2048, help=f"sequence length (default 2048, at most {MAX_SEQ_LEN:,})")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per FSDP rank (default 1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--train", action="store_true", help="one training step (default)")
    mode.add_argument("--infer", action="store_true", help="prefill plus --decode-tokens decode steps")
    p.add_argument("--decode-tokens", type=int, default=128, help="decode steps with --infer (default 128)")
    p.add_argument("--dtype", default="bf16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each decoder layer")
    p.add_argument("--price-per-hour", type=float, default=None, help="USD per instance-hour (default: price table)")
    p.add_argument("--sweep", action="store_true", help="rank fitting TP × FSDP × batch layouts by cost per token")
    p.add_argument("--out", default="plan.json",
                   help="where to write the plan (default plan.json); an --out ending in .json also gets the "
                        "page beside it (plan.html), any other name only that file")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out (or page) that torchneuron plan did not write")
    p.set_defaults(func=run)
