"""``torchneuron plan MODEL``: per-rank HBM, compilations, projected step time, serving latency
and cost of a layout, without allocating the model; ``--validate``: the projection against AWS's
published Trainium results. See docs/plan.md.

Every argument is checked before any work (:func:`check_arguments`, :func:`check_outputs`):
a bad one is one line and ``ExitCode.USER_ERROR``. A layout that does not fit is planned and
written, and exits with ``ExitCode.FAILURE``. The outputs are staged and published whole, so an
error, a full disk or an interrupt (``INTERRUPTED`` / ``TERMINATED``) leaves the previous plan
intact.
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
    """Raise a one-line ``UsageError`` for a flag value (or calibration file) no plan can use,
    before the model is read. Extend it when adding a flag."""
    from torch_neuronx.projection import active_calibration
    from torch_neuronx.runtime.errors import UsageError

    active_calibration()  # TORCHNEURON_PROJECTION_CALIBRATION, read now rather than after the trace
    price = args.price_per_hour
    if price is not None and not (math.isfinite(price) and price > 0):
        raise UsageError(f"--price-per-hour must be a positive, finite number of USD (got {price})")
    sequence_flag = "--input-len" if args.infer and args.input_len is not None else "--seq-len"
    for flag, value in ((sequence_flag, _seq_len(args)), ("--output-len/--decode-tokens", args.output_len or 0),
                        ("--max-len", args.max_len or 0)):
        if value > MAX_SEQ_LEN:
            raise UsageError(f"{flag} {value:,} is above the limit of {MAX_SEQ_LEN:,} tokens "
                             "(longer than any published context window)")
    if _batch(args) * _seq_len(args) > MAX_TOKENS_PER_RANK:
        raise UsageError(f"batch {_batch(args):,} × sequence {_seq_len(args):,} is above the limit of "
                         f"{MAX_TOKENS_PER_RANK:,} tokens per rank per step")


def _seq_len(args: argparse.Namespace) -> int:
    """The training sequence, or the prompt with --infer."""
    return args.input_len if args.infer and args.input_len is not None else args.seq_len


def _batch(args: argparse.Namespace) -> int:
    return args.micro_batch if args.micro_batch is not None else args.batch_size


def _model_config_file(model: str) -> Path | None:
    path = Path(model)
    return path / "config.json" if path.is_dir() else path if path.is_file() else None


def check_outputs(args: argparse.Namespace) -> list[Path]:
    """The files this run will write, each checked now: ``--out``, plus the page beside it
    when ``--out`` ends in ``.json``. Never the model's config; never a file another tool
    wrote unless ``--force``; always in a directory that can be written."""
    from torch_neuronx.plan.html import is_plan_page
    from torch_neuronx.plan.render import is_plan_json
    from torch_neuronx.runtime.errors import UsageError
    from torch_neuronx.runtime.staged_files import unwritable_reason

    out = Path(args.out)
    targets = [out] + ([out.with_suffix(".html")] if out.suffix.lower() == ".json" else [])
    source = _model_config_file(args.model)
    for target, recognised in zip(targets, (is_plan_json, is_plan_page)):
        what = "--out" if target is out else f"the page beside --out, {target},"
        if source is not None and target.resolve() == source.resolve():
            raise UsageError(f"{what} {target} is the model config being planned: plan never writes over its "
                             "input; choose another --out")
        problem = unwritable_reason(target)
        if problem:
            raise UsageError(f"{what} {target} {problem}")
        if target.exists() and not args.force and not recognised(target):
            raise UsageError(f"{what} {target} exists and was not written by torchneuron plan; pass --force "
                             "to replace it, or choose another --out")
    return targets


def _warn_past_context(planner, args: argparse.Namespace) -> None:
    context = getattr(planner.config, "max_position_embeddings", None)
    tokens = _seq_len(args) + (planner.ctx.output_len if args.infer else 0)
    if context and tokens > context:
        print(f"warning: {tokens:,} tokens per sequence is past the model's context of {context:,} "
              "(max_position_embeddings): the plan extrapolates a length the model was not built for",
              file=sys.stderr)


def _previous(targets: list[Path]) -> str:
    """What an interrupted or failed run leaves, for its one-line message."""
    kept = [str(t) for t in targets if t.exists()]
    return f"{' and '.join(kept)} kept as before" if kept else "nothing written"


def _publish(plan, targets: list[Path], files) -> None:
    """Stage every output in ``files`` (a ``StagedFiles``), then publish them together; an
    OSError leaves the previous ones."""
    from torch_neuronx.plan.html import render_html
    from torch_neuronx.plan.render import json_text
    from torch_neuronx.runtime.errors import UsageError

    texts = [json_text(plan.to_dict())]  # strict JSON first: a non-finite figure fails before anything is staged
    if len(targets) > 1:
        texts.append(render_html(plan, json_name=targets[0].name))
    try:
        for target, text in zip(reversed(targets), reversed(texts)):  # the page first, the JSON last
            files.write_text(target, text)
        files.publish()
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror or exc}; {_previous(targets)}") from None


def _validate(args: argparse.Namespace) -> int:
    from torch_neuronx.plan.validate import validate
    from torch_neuronx.runtime.exit_codes import ExitCode

    doc = Path(args.docs) if args.docs else None
    _, _, markdown = validate(retrace=args.retrace, doc=doc)
    print(markdown)
    if doc is not None:
        print(f"wrote the table into {doc}")
    return ExitCode.SUCCESS


def _layout(args: argparse.Namespace, planner):
    from torch_neuronx.plan import Layout
    from torch_neuronx.runtime.errors import UsageError

    if args.fsdp is not None:
        if args.dp is not None and args.dp != args.fsdp or args.shard not in (None, "fsdp"):
            raise UsageError("--fsdp F means --dp F --shard fsdp: give one or the other")
        dp, shard = args.fsdp, "fsdp"
    else:
        dp, shard = args.dp or 1, args.shard or "fsdp"
    lnc = args.lnc or planner.profile.default_lnc
    return Layout(args.tp, dp, _batch(args), args.activation_checkpointing, lnc, args.instances, pp=args.pp,
                  shard=shard, global_batch=args.global_batch, sequence_parallel=args.sequence_parallel)


def _planner(args: argparse.Namespace):
    from torch_neuronx.plan import Planner

    return Planner(args.model, args.instance, _seq_len(args), "infer" if args.infer else "train",
                   args.precision or args.dtype or "bf16", args.output_len, args.price_per_hour, args.mode,
                   max_len=args.max_len, weight_dtype=args.weight_dtype, vocab_parallel=args.vocab_parallel,
                   attention=args.attention, context_bucket=args.context_bucket)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from rich.console import Console

    from torch_neuronx.plan.render import show
    from torch_neuronx.plan.sweep_table import show_sweep
    from torch_neuronx.runtime.errors import UsageError
    from torch_neuronx.runtime.exit_codes import ExitCode, interrupted_by
    from torch_neuronx.runtime.interrupts import interrupt_signal
    from torch_neuronx.runtime.staged_files import StagedFiles

    if args.validate:
        return _validate(args)
    if args.model is None:
        raise UsageError("plan needs a MODEL (or --validate)")
    check_arguments(args)
    targets = check_outputs(args)
    written = " and ".join(map(str, targets))
    with StagedFiles() as files:
        try:  # SIGTERM arrives as an interrupt too (cli/main.py)
            planner = _planner(args)
            layout = _layout(args, planner)
            planner.check(layout)
            _warn_past_context(planner, args)
            console = Console()
            plan = planner.plan(layout)
            show(plan, console)
            if args.sweep:
                plan = dataclasses.replace(plan, sweep=tuple(planner.sweep(layout)))
                show_sweep("train" if plan.job.mode == "train" else plan.kind, list(plan.sweep), console)
            _publish(plan, targets, files)
            console.print(f"wrote {written}")
        except KeyboardInterrupt as exc:  # held back while publishing, so either before it or after
            signum = interrupt_signal(exc)
            outcome = f"{written} already written" if files.published else _previous(targets)
            print(f"error: interrupted by {signum.name}; {outcome}", file=sys.stderr)
            return interrupted_by(signum)
    return ExitCode.SUCCESS if plan.fits else ExitCode.FAILURE


def _add_serving_arguments(p, plan_dtype) -> None:
    """The flags that shape a serving job (--infer): its lengths, cache, weights and attention."""
    p.add_argument("--input-len", type=int, default=None, help="prompt tokens with --infer (default --seq-len)")
    p.add_argument("--output-len", "--decode-tokens", dest="output_len", type=int, default=None,
                   help="output tokens with --infer (default 128 for a decoder; an encoder produces none)")
    p.add_argument("--max-len", type=int, default=None,
                   help="with --infer: the static KV cache the serving graphs are compiled for; every decode "
                        "step reads all of it (default input + output)")
    p.add_argument("--weight-dtype", type=plan_dtype(("bf16", "fp16", "int8", "fp8")), default=None,
                   help="with --infer: how the weights are stored, bf16, fp16, int8 or fp8 (dequantized to "
                        "--precision on chip; default the precision's)")
    p.add_argument("--context-bucket", type=int, default=None,
                   help="with --infer: the length the context encoding is compiled for; the prompt is padded up "
                        "to it, as the serving stacks' context-encoding buckets do (default: the prompt's length)")
    p.add_argument("--attention", choices=("fused", "materialized"), default=None,
                   help="fused: one attention kernel keeps the scores on chip; materialized: the scores are "
                        "computed in full (default: fused to train, materialized to serve)")
    p.add_argument("--vocab-parallel", action="store_true",
                   help="split the input embedding over TP on the vocabulary (the LM head always is)")


def add_parser(sub) -> None:
    from torch_neuronx.cli.options import add_instance, plan_dtype

    p = sub.add_parser("plan", help="size a training or inference job on Trainium without allocating it",
                       description="Per-rank HBM, first-run compilations, projected step time, tokens/s, MFU "
                       "and cost of a TP × PP × DP layout (training); TTFT, time per output token and cost "
                       "per 1M output tokens of a decoder, or the latency of an encoder (--infer), in "
                       "compiled or eager mode. Exit code 1 when the layout does not fit (its figures are "
                       "marked 'if it fit'), 2 on bad input; 130 / 143 when interrupted by SIGINT / SIGTERM "
                       "(the previous plan is kept).")
    p.add_argument("model", nargs="?", help="a config.json, a checkpoint directory, or a bundled config "
                                            "(llama-3-8b, llama-3.1-70b, bert-large-uncased, ...)")
    add_instance(p, "the cores, HBM, links and price planned")
    p.add_argument("--instances", type=int, default=1, help="number of instances (default 1)")
    p.add_argument("--lnc", type=int, default=None, help="logical NeuronCore config (default: the instance's)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages, 1F1B schedule (default 1)")
    p.add_argument("--dp", type=int, default=None,
                   help="data-parallel degree; with --infer, serving replicas, each with the whole TP-sharded "
                        "model (default 1)")
    p.add_argument("--shard", choices=("fsdp", "zero1", "none"), default=None,
                   help="what data parallelism shards: fsdp (parameters, gradients, optimizer state), "
                        "zero1 (optimizer state), none (default fsdp)")
    p.add_argument("--fsdp", type=int, default=None, help="same as --dp F --shard fsdp")
    p.add_argument("--seq-len", type=int, default=2048,
                   help=f"training sequence length (default 2048, at most {MAX_SEQ_LEN:,})")
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
                      help="project AWS's published Trainium results, fit the physical factors and print the "
                           "leave-one-out table (written into a file only with --docs)")
    _add_serving_arguments(p, plan_dtype)
    p.add_argument("--precision", type=plan_dtype(("bf16", "fp16", "fp32", "autocast-bf16", "fp8")), default=None,
                   help="bf16 (default), fp16, fp32 (also spelled bfloat16, float16, half, float32, any "
                        "case), autocast-bf16 (fp32 master weights and optimizer state, bf16 compute), or "
                        "fp8 (bf16 with every nn.Linear's matmuls in FP8, torchao's float8 recipe in the "
                        "instance's formats)")
    p.add_argument("--dtype", type=plan_dtype(("bf16", "fp16", "fp32")), default=None,
                   help="same as --precision: bf16, fp16 or fp32, in any spelling")
    p.add_argument("--mode", choices=("compile", "eager"), default="compile",
                   help="compile: one graph per forward, backward, optimizer step, prefill, decode "
                        "(default); eager: one kernel launch per op")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="split the hidden-state elementwise work (norms, residuals) over the TP group")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each decoder layer")
    p.add_argument("--price-per-hour", type=float, default=None, help="USD per instance-hour (default: price table)")
    p.add_argument("--sweep", action="store_true",
                   help="rank fitting TP × DP × micro-batch layouts by cost per token (--infer: TP × replicas "
                        "× batch by cost per 1M output tokens, then latency)")
    p.add_argument("--out", default="plan.json",
                   help="where to write the plan (default plan.json); an --out ending in .json also gets the "
                        "page beside it (plan.html), any other name only that file")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out (or page) that torchneuron plan did not write")
    p.add_argument("--retrace", action="store_true",
                   help="with --validate: trace the published rows again and keep their work and the fitted "
                        "factors in the package (without it, --validate changes no file)")
    p.add_argument("--docs", help="with --validate: also write the table into this document's generated section")
    p.set_defaults(func=run)
