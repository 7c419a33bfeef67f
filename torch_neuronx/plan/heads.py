"""How tensor parallelism splits attention heads it does not divide, as the real stacks do.

Query heads are padded with zero heads up to a multiple of TP: NeuronX Distributed's
``pad_model`` adds ``tp − heads mod tp`` heads ("Padding Tensor-Parallel Layers",
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/neuronx-distributed/api_guide.html;
``neuronx_distributed.parallel_layers.pad.get_number_of_extra_heads``). Key/value heads follow NxD
Inference's grouped-query sharding (``modules/attention/gqa.py``, ``get_shardable_head_counts``):
a KV count TP divides is sharded as it is; when TP is a multiple of it, each rank holds one KV
head, replicated ``tp / kv`` times (``REPLICATE_TO_TP_DEGREE``); otherwise every padded query head
gets its own copy of its KV head (``CONVERT_TO_MHA``). An MHA model pads its KV heads with its
query heads. The padded heads cost compute, weights and KV cache like real ones.
"""
from __future__ import annotations

import dataclasses


def padded(n: int, tp: int) -> int:
    """``n`` rounded up to a multiple of ``tp`` (``n + get_number_of_extra_heads(n, tp)``)."""
    return -(-n // tp) * tp


@dataclasses.dataclass(frozen=True)
class HeadLayout:
    """The attention heads of one model at one TP degree."""

    tp: int
    heads: int  # the model's query heads
    kv_heads: int
    padded_heads: int  # query heads the TP group holds, zero heads included
    padded_kv_heads: int  # KV heads the TP group holds, replicas and zero heads included
    strategy: str  # "sharded", "replicate-kv" (one KV head per rank) or "convert-to-mha"

    @property
    def heads_per_rank(self) -> int:
        return self.padded_heads // self.tp

    @property
    def kv_heads_per_rank(self) -> int:
        return self.padded_kv_heads // self.tp

    @property
    def extra_heads(self) -> int:
        return self.padded_heads - self.heads

    @property
    def zero_kv_heads(self) -> int:
        """KV heads that are padding (zeros), not copies of a real head."""
        if self.strategy == "sharded":
            return self.padded_kv_heads - self.kv_heads
        return self.extra_heads if self.strategy == "convert-to-mha" else 0

    @property
    def kv_replicas(self) -> int:
        """Ranks holding the same KV head (their gradients are all-reduced in training)."""
        return self.tp // self.kv_heads if self.strategy == "replicate-kv" else 1

    def describe(self) -> str:
        """One line for the plan: what TP does with the heads."""
        parts = []
        if self.extra_heads:
            parts.append(f"{self.heads} query heads padded to {self.padded_heads} (+{self.extra_heads} zero heads)")
        if self.strategy == "replicate-kv":
            parts.append(f"each of the {self.kv_heads} KV heads replicated on {self.kv_replicas} ranks")
        elif self.strategy == "convert-to-mha" and self.kv_heads != self.heads:
            parts.append(f"{self.kv_heads} KV heads copied to each of the {self.padded_heads} query heads")
        return "; ".join(parts) or f"{self.heads} heads split evenly over TP {self.tp}"


def head_layout(heads: int, kv_heads: int | None, tp: int) -> HeadLayout:
    """The heads at ``tp`` by the rule of the module docstring."""
    kv = kv_heads or heads
    q = padded(heads, tp)
    if kv == heads:
        return HeadLayout(tp, heads, kv, q, q, "sharded")
    if kv % tp == 0:
        return HeadLayout(tp, heads, kv, q, kv, "sharded")
    if tp % kv == 0:
        return HeadLayout(tp, heads, kv, q, tp, "replicate-kv")
    return HeadLayout(tp, heads, kv, q, q, "convert-to-mha")


def config_heads(config, tp: int) -> HeadLayout | None:
    """The head layout of a Transformers config (``None`` when it names no attention heads)."""
    heads = getattr(config, "num_attention_heads", None)
    if not heads:
        return None
    return head_layout(heads, getattr(config, "num_key_value_heads", None), tp)
