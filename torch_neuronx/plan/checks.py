"""Which jobs and layouts a plan accepts: every refusal is one ``UsageError`` line naming the flag
and what is allowed, raised before any trace (``check_job`` needs the config only,
``check_layout`` adds the layout and, for serving, the exact weight count on the meta device)."""
from __future__ import annotations

from ..projection.hardware import load_data
from ..runtime.errors import UsageError
from ..runtime.profiles import GiB
from .context import PlanContext
from .request import ATTENTIONS, EXECUTIONS, PRECISIONS, SHARDS, WEIGHT_DTYPES, Job, Layout


def check_request(job: Job) -> None:
    """The flags that need no model: mode, dtypes, lengths."""
    if job.mode not in ("train", "infer"):
        raise UsageError(f"mode {job.mode!r} is not train or infer")
    if job.precision not in PRECISIONS:
        raise UsageError(f"--precision {job.precision!r} is not one of {', '.join(PRECISIONS)}")
    if job.execution not in EXECUTIONS:
        raise UsageError(f"--mode {job.execution!r} is not one of {', '.join(EXECUTIONS)}")
    if job.seq_len < 1 or (job.output_len or 0) < 0:
        raise UsageError("--seq-len/--input-len must be >= 1 and --output-len >= 0")
    if job.mode == "train" and (job.weight_dtype or job.max_len):
        raise UsageError("--weight-dtype and --max-len are serving knobs: use them with --infer")
    if job.attention is not None and job.attention not in ATTENTIONS:
        raise UsageError(f"--attention {job.attention!r} is not one of {', '.join(ATTENTIONS)}")
    if job.weight_dtype is not None and job.weight_dtype not in WEIGHT_DTYPES:
        raise UsageError(f"--weight-dtype {job.weight_dtype!r} is not one of {', '.join(WEIGHT_DTYPES)}")


def check_job(ctx: PlanContext) -> None:
    """What the model's kind allows (``check_request`` first)."""
    job = ctx.job
    check_request(job)
    if ctx.train:
        return
    if ctx.kind == "encoder-decoder":
        raise UsageError(f"--infer plans decoders and encoders; {job.model!r} is an encoder-decoder "
                         f"({ctx.config.model_type}), which it does not model")
    if ctx.kind == "encoder" and (job.output_len or 0) > 0:
        raise UsageError(f"--output-len {job.output_len}: {job.model!r} is an encoder, which produces no tokens "
                         "(one forward of the batch); leave --output-len out or pass 0")
    needed = job.seq_len + ctx.output_len
    if ctx.kind == "decoder" and job.max_len is not None and job.max_len < needed:
        raise UsageError(f"--max-len {job.max_len:,} is below input + output = {needed:,} tokens: the static "
                         "cache must hold the prompt and every output token")
    if ctx.kind == "encoder" and job.max_len is not None:
        raise UsageError(f"--max-len: {job.model!r} is an encoder, which keeps no KV cache")
    target = load_data()["targets"][ctx.profile.family]
    if job.weight_dtype == "fp8" and "fp8" not in target["per_physical_core"]["tensor_flops"]:
        raise UsageError(f"--weight-dtype fp8: the NeuronCores of {ctx.profile.name} hold no FP8 format; "
                         f"use {', '.join(d for d in WEIGHT_DTYPES if d != 'fp8')}")


def check_layout(ctx: PlanContext, layout: Layout) -> None:
    """The layout's degrees against the model and the instances."""
    if min(layout.tp, layout.dp, layout.pp, layout.batch, layout.instances) < 1:
        raise UsageError("--tp, --pp, --dp, --micro-batch/--batch-size and --instances must be >= 1")
    if layout.shard not in SHARDS:
        raise UsageError(f"--shard {layout.shard!r} is not one of {', '.join(SHARDS)}")
    profile = ctx.profile
    if layout.lnc not in profile.allowed_lnc:
        raise UsageError(f"LNC={layout.lnc} is not supported on {profile.name} "
                         f"(allowed: {', '.join(map(str, profile.allowed_lnc))})")
    layers = ctx.config.num_hidden_layers
    if layers % layout.pp:
        raise UsageError(f"--pp {layout.pp} does not divide the model's {layers} layers")
    if layout.pp > 1 and not ctx.train:
        raise UsageError("--pp is modelled for training only")
    layout.micro_batches  # noqa: B018  raises when G is not divisible by M·D
    cores = ctx.cores_per_instance(layout.lnc) * layout.instances
    if layout.world > cores:
        raise UsageError(f"world size tp×pp×dp = {layout.world} is larger than the {cores} logical cores "
                         f"of {layout.instances}×{profile.name} at LNC={layout.lnc}")
    if not ctx.train:
        _check_weights_held(ctx, layout)


def _check_weights_held(ctx: PlanContext, layout: Layout) -> None:
    """Serving: the model's stored weights must fit the HBM of all the instances' cores at all."""
    weights = ctx.weight_bytes(1)
    cores = ctx.cores_per_instance(layout.lnc) * layout.instances
    hbm = ctx.profile.hbm_per_logical_core(layout.lnc) * cores
    if weights <= hbm:
        return
    name = ctx.job.weight_dtype or ctx.job.precision
    narrower = [d for d, t in WEIGHT_DTYPES.items() if t.itemsize < ctx.weight_dtype.itemsize]
    hint = f"--weight-dtype {' or '.join(narrower)}, or " if narrower else ""
    raise UsageError(f"--weight-dtype {name}: the model's weights take {weights / GiB:,.1f} GiB, more than the "
                     f"{hbm / GiB:,.1f} GiB of HBM of {layout.instances}×{ctx.profile.name}; use {hint}"
                     "more --instances")
