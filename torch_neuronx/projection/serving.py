"""Serving on many ranks: a decoder's time to first token and time per output token, an
encoder's latency of one batch, from one replica's work (``job.GraphWork``, ``job.CommWork``)
and the fitted factors. Replicas each hold the whole TP-sharded model and serve their own
batches, so throughput scales with them and latency does not. Every figure is projected.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .job import CommWork, Factors, GraphWork


@dataclasses.dataclass(frozen=True)
class InferenceWork:
    """One replica's work for a batch of prompts: the prefill graph, one decode step."""

    prefill: GraphWork  # the whole prompt of the batch
    decode: GraphWork  # one token per sequence, reading the whole static cache
    prefill_comm: CommWork
    decode_comm: CommWork
    batch: int
    output_len: int


@dataclasses.dataclass(frozen=True)
class InferenceTime:
    mode: str
    ttft_seconds: float  # the prefill graph (and its collectives)
    tpot_seconds: float  # one decode step
    request_seconds: float  # TTFT + (O − 1) decode steps
    tokens_per_second: float  # output tokens of the batch / request seconds (one replica)


def inference_time(work: InferenceWork, f: Factors, mode: str = "compile",
                   eager_seconds: Mapping[str, float] | None = None) -> InferenceTime:
    if mode == "compile":
        prefill, decode = work.prefill.seconds(f), work.decode.seconds(f)
    else:
        prefill, decode = eager_seconds[work.prefill.name], eager_seconds[work.decode.name]
    ttft = prefill + work.prefill_comm.seconds(f)
    tpot = decode + work.decode_comm.seconds(f)
    request = ttft + max(work.output_len - 1, 0) * tpot
    return InferenceTime(mode, ttft, tpot, request, work.batch * work.output_len / request)


@dataclasses.dataclass(frozen=True)
class EncoderWork:
    """One replica's work for one batch of an encoder: a single forward graph."""

    forward: GraphWork
    comm: CommWork
    batch: int


@dataclasses.dataclass(frozen=True)
class EncoderTime:
    mode: str
    latency_seconds: float  # one forward of the batch
    sequences_per_second: float  # one replica


def encoder_time(work: EncoderWork, f: Factors, mode: str = "compile",
                 eager_seconds: Mapping[str, float] | None = None) -> EncoderTime:
    seconds = work.forward.seconds(f) if mode == "compile" else eager_seconds[work.forward.name]
    latency = seconds + work.comm.seconds(f)
    return EncoderTime(mode, latency, work.batch / latency)


def serving_time(work: InferenceWork | EncoderWork, f: Factors, mode: str = "compile",
                 eager_seconds: Mapping[str, float] | None = None) -> InferenceTime | EncoderTime:
    """The time of either kind of serving work."""
    if isinstance(work, EncoderWork):
        return encoder_time(work, f, mode, eager_seconds)
    return inference_time(work, f, mode, eager_seconds)
