"""What a plan is asked: the job (model, instance, sequence, mode, dtypes, serving knobs) and the
layout (how its ranks are arranged). Both are plain frozen values; ``checks.py`` says which
combinations are valid, before any work."""
from __future__ import annotations

import dataclasses

import torch

from ..projection import job

# precision → (parameter dtype, compute dtype): autocast keeps fp32 master weights and optimizer state
PRECISIONS = {"bf16": (torch.bfloat16, torch.bfloat16), "fp16": (torch.float16, torch.float16),
              "fp32": (torch.float32, torch.float32), "autocast-bf16": (torch.float32, torch.bfloat16)}
# how serving stores the weights; each is dequantized to --precision on chip before its matmul
WEIGHT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8, "fp8": torch.float8_e4m3fn}
SHARDS = ("fsdp", "zero1", "none")
EXECUTIONS = ("compile", "eager")
ATTENTIONS = ("fused", "materialized")
DEFAULT_OUTPUT_LEN = 128  # decode tokens of a decoder when --output-len is not given


@dataclasses.dataclass(frozen=True)
class Job:
    """The job to plan, apart from its layout."""

    model: str
    instance: str
    seq_len: int  # the training sequence, the prompt, or the encoder's input
    mode: str = "train"  # train | infer
    precision: str = "bf16"
    output_len: int | None = None  # decode tokens; None: DEFAULT_OUTPUT_LEN for a decoder, 0 for an encoder
    max_len: int | None = None  # the static KV cache the serving graphs are compiled for; None: input + output
    weight_dtype: str | None = None  # how serving stores the weights; None: the precision's parameter dtype
    price_per_hour: float | None = None
    execution: str = "compile"  # compile | eager
    vocab_parallel: bool = False  # split the input embedding over TP (the LM head always is)
    attention: str | None = None  # "fused" | "materialized"; None: fused to train, materialized to serve

    @property
    def fused_attention(self) -> bool:
        """Whether attention runs as one fused (flash) kernel: the published training results ran
        NKI flash attention; serving without an attention kernel computes the masked scores of
        the static cache in full (matmul, softmax, matmul), which a fused kernel keeps on chip."""
        return self.attention == "fused" if self.attention else self.mode == "train"

    @property
    def dtype(self) -> torch.dtype:
        return PRECISIONS[self.precision][0]

    @property
    def compute_dtype(self) -> torch.dtype:
        return PRECISIONS[self.precision][1]


@dataclasses.dataclass(frozen=True)
class Layout:
    tp: int
    dp: int  # data parallelism in training; serving replicas (each with the whole TP-sharded model) with --infer
    batch: int  # micro-batch: sequences per data-parallel rank per micro-step (a replica's batch when serving)
    checkpointing: bool
    lnc: int
    instances: int
    pp: int = 1
    shard: str = "fsdp"  # how data parallelism shards: fsdp (everything), zero1 (optimizer state), none
    global_batch: int | None = None  # sequences per optimizer step; None: one micro-batch per rank
    sequence_parallel: bool = False  # split the hidden-state elementwise work over the TP group

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def sequences_per_step(self) -> int:
        return self.global_batch or self.batch * self.dp

    @property
    def micro_batches(self) -> int:
        return job.accumulation_steps(self.sequences_per_step, self.batch, self.dp)

    def rank(self, tp: int, dp: int, pp: int) -> int:
        """Global rank: TP innermost (inside a chip or instance), then DP, then pipeline stages."""
        return tp + self.tp * (dp + self.dp * pp)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"world": self.world, "micro_batches": self.micro_batches}


def diff(a: Layout, b: Layout) -> str:
    """The fields ``b`` changes from ``a``, as ``name old → new``."""
    return ", ".join(f"{f.name} {getattr(a, f.name)} → {getattr(b, f.name)}" for f in dataclasses.fields(Layout)
                     if getattr(a, f.name) != getattr(b, f.name))
