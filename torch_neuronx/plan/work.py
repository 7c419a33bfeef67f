"""One rank's work as the projection prices it (``projection.job``): the graphs it launches with
their FLOPs, engine time and HBM traffic, its collectives, its micro-batches; and the eager
(per-op) seconds of each graph for ``--mode eager``.

Training: a forward and a backward graph per micro-batch and one optimizer graph per global
batch. Serving a decoder: the prefill graph of the batch's prompts and one decode graph per
output token, which reads the weights and the whole static KV cache (``max_len`` positions, as
the static-cache path does: the mask hides the unused positions, the reads happen anyway).
Serving an encoder: one forward graph of the batch. Weights stored narrower than the compute
dtype (``--weight-dtype int8|fp8``) are read in their stored dtype and dequantized on VectorE.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter

from ..projection import job, serving
from .collectives import dp_collectives, pipeline_sends, tp_all_reduces, tp_collectives
from .context import PlanContext
from .request import Layout
from .trace import optimizer_calls


def graph(ctx: PlanContext, layout: Layout, name: str, calls: Counter, io_bytes: float,
          converts: Counter | None = None, scale: float = 1.0, sequence_parallel: bool = True) -> job.GraphWork:
    """``calls`` as one graph reading and writing ``io_bytes``; the hidden-state work split over TP
    when the layout runs sequence parallelism (``sequence_parallel`` False: a graph that does not,
    such as a decode step of one token per sequence)."""
    proj = ctx.projector(layout.lnc)
    sp = job.SequenceParallel(layout.tp, ctx.config.hidden_size) \
        if layout.sequence_parallel and sequence_parallel and layout.tp > 1 else None
    work = job.graph_work(name, proj.kernels, calls, io_bytes / scale, proj.device, proj.calibration, sp, converts)
    return work.scaled(scale) if scale != 1 else work


def _eager(ctx: PlanContext, layout: Layout, calls: Counter, scale: float) -> float:
    return ctx.projector(layout.lnc).summary(calls)["device_seconds"] * scale


def training_work(ctx: PlanContext, layout: Layout) -> tuple[job.TrainingWork, dict[str, float]]:
    """One rank's work per global batch, and the eager (per-op) seconds of each graph."""
    proj = ctx.projector(layout.lnc)
    t = ctx.traced(layout.tp, layout.batch, layout.checkpointing, layout.lnc)
    stage_layers = ctx.config.num_hidden_layers // layout.pp
    item = ctx.job.dtype.itemsize
    weights = ctx.stage_parameters(layout) * item
    read = weights - ctx.parameters(layout.tp, 1).embedding_tp_local * item  # a lookup reads the rows it needs
    saved = t.activations(stage_layers)
    grads = weights * (2 if layout.micro_batches > 1 else 1)  # written, and read back while accumulating
    fwd, bwd = t.graph_calls("forward", stage_layers), t.graph_calls("backward", stage_layers)
    opt_numel = math.ceil(ctx.stage_parameters(layout) / (layout.dp if layout.shard != "none" else 1))
    opt = optimizer_calls(opt_numel, ctx.job.dtype, proj)
    s = t.tp_scale
    forward = graph(ctx, layout, "forward", fwd, read + saved, t.graph_converts("forward", stage_layers), s)
    backward = graph(ctx, layout, "backward", bwd, read + saved + grads, t.graph_converts("backward", stage_layers), s)
    # read parameter, gradient and two moments; write parameter and moments
    optimizer = graph(ctx, layout, "optimizer", opt, 7 * opt_numel * item)
    eager = {"forward": _eager(ctx, layout, fwd, s), "backward": _eager(ctx, layout, bwd, s),
             "optimizer": _eager(ctx, layout, opt, 1.0)}
    whole = (graph(ctx, layout, "model", t.graph_calls("forward") + t.graph_calls("backward"), 0, scale=s).flops
             * layout.tp * layout.sequences_per_step / layout.batch)
    sends, send_sharing = pipeline_sends(ctx, layout)
    dp_micro, dp_step, dp_sharing = dp_collectives(ctx, layout)
    device, cal = proj.device, proj.calibration
    work = job.TrainingWork(
        forward=forward, backward=backward, optimizer=optimizer,
        micro_comm=job.comm_work(tp_collectives(ctx, layout) + sends + dp_micro, device, cal,
                                 send_sharing | dp_sharing),
        step_comm=job.comm_work(dp_step, device, cal, dp_sharing),
        micro_batches=layout.micro_batches, pp=layout.pp, tokens_per_step=layout.sequences_per_step * ctx.job.seq_len,
        model_flops_per_step=whole, peak_flops_per_rank=device.tensor_flops["bf16"], ranks=layout.world)
    return work, eager


def _dequantized(ctx: PlanContext, layout: Layout, g: job.GraphWork) -> job.GraphWork:
    """``g`` with the dequantization of the rank's narrow weights on VectorE (one element each)."""
    if ctx.weight_dtype.itemsize >= ctx.job.compute_dtype.itemsize:
        return g
    proj = ctx.projector(layout.lnc)
    elements = ctx.parameters(layout.tp, 1).matmul_tp_local
    seconds = elements / (proj.device.engine_flops["vector"] * proj.calibration.efficiency["vector"])
    return dataclasses.replace(g, engine_seconds=g.engine_seconds + seconds)


def _serving_comm(ctx: PlanContext, layout: Layout, tokens: int) -> job.CommWork:
    proj = ctx.projector(layout.lnc)
    return job.comm_work(tp_all_reduces(ctx, layout, tokens, 1), proj.device, proj.calibration)


def _weights_read(ctx: PlanContext, layout: Layout) -> float:
    """The rank's stored weights a graph reads: every table but the embeddings (rows looked up)."""
    return ctx.weight_bytes(layout.tp) - ctx.parameters(layout.tp, 1).embedding_tp_local * ctx.job.dtype.itemsize


def serving_work(ctx: PlanContext, layout: Layout) -> tuple[serving.InferenceWork | serving.EncoderWork, dict[str, float]]:
    """A replica's work: a decoder's prefill and decode step, or an encoder's forward."""
    t = ctx.traced(layout.tp, layout.batch, False, layout.lnc)
    s = t.tp_scale
    weights = _weights_read(ctx, layout)
    tokens = layout.batch * ctx.job.seq_len
    if ctx.kind != "decoder":
        calls = t.graph_calls("forward")
        forward = _dequantized(ctx, layout, graph(ctx, layout, "forward", calls, weights,
                                                  t.graph_converts("forward"), s))
        return (serving.EncoderWork(forward, _serving_comm(ctx, layout, tokens), layout.batch),
                {"forward": _eager(ctx, layout, calls, s)})
    prefill_calls, decode_calls = t.graph_calls("prefill"), t.graph_calls("decode")
    prefill = graph(ctx, layout, "prefill", prefill_calls, weights + ctx.kv_cache_bytes(layout, ctx.job.seq_len),
                    t.graph_converts("prefill"), s)
    decode = graph(ctx, layout, "decode", decode_calls, weights + ctx.kv_cache_bytes(layout, ctx.max_len),
                   t.graph_converts("decode"), s, sequence_parallel=False)
    work = serving.InferenceWork(_dequantized(ctx, layout, prefill), _dequantized(ctx, layout, decode),
                             _serving_comm(ctx, layout, tokens), _serving_comm(ctx, layout, layout.batch),
                             layout.batch, ctx.output_len)
    return work, {"prefill": _eager(ctx, layout, prefill_calls, s), "decode": _eager(ctx, layout, decode_calls, s)}
