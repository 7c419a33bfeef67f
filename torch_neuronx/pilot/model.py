"""The model under test: a local Transformers checkpoint or the built-in tiny Llama.

The CPU reference and the device copy start from the same weights (one load,
then a copy moved to the device), so every difference the pilot reports comes
from the device, not from loading twice.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from ..testing.tiny_models import BOS, EOS, PAD, TinySize, tiny_causal_lm
from .config import PilotConfig, PilotError

# Small enough that the whole default pilot (with torch.compile) runs in a few
# minutes on two host cores, large enough to have GQA, RoPE, RMSNorm and SwiGLU.
BUILTIN_SIZE = TinySize(hidden=128, intermediate=256, heads=4, kv_heads=2, layers=2,
                        vocab=320,  # the byte-level tokenizer's 259 ids, rounded up
                        positions=512)


def causal_lm_types() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def build_builtin(cfg: PilotConfig):
    model = tiny_causal_lm("llama", BUILTIN_SIZE, cfg.seed, cfg.attn_implementation, pad_token_id=PAD,
                           bos_token_id=BOS, eos_token_id=EOS, tie_word_embeddings=False)
    return model.to(cfg.torch_dtype)


def load_checkpoint(path: str, dtype: torch.dtype, attn_implementation: str):
    """Load a local causal-LM checkpoint, turning every failure into a one-line error."""
    from transformers import AutoModelForCausalLM

    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise PilotError("bad_input", f"{path} has no config.json: not a Transformers checkpoint directory")
    try:
        model_type = json.loads(config_file.read_text()).get("model_type")
    except ValueError as exc:
        raise PilotError("bad_input", f"{config_file} is not valid JSON ({exc})") from None
    if model_type not in causal_lm_types():
        raise PilotError(
            "not_causal_lm",
            f"{path} holds a {model_type!r} model, which is not a causal language model "
            "(no AutoModelForCausalLM class in the installed Transformers)",
        )
    try:
        model, loading = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation=attn_implementation, local_files_only=True,
            output_loading_info=True,
        )
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PilotError("bad_input", f"cannot load {path}: {first_line}") from None
    # A checkpoint of another head (e.g. a plain encoder) loads with fresh random weights where
    # the head should be: every result would describe a model nobody trained.
    missing, unexpected = sorted(loading["missing_keys"]), sorted(loading["unexpected_keys"])
    if missing or unexpected:
        parts = [f"{len(keys)} {what} ({', '.join(keys[:3])}{', …' if len(keys) > 3 else ''})"
                 for keys, what in ((missing, "weights it needs are missing"),
                                    (unexpected, "weights in the checkpoint are not used")) if keys]
        raise PilotError("not_causal_lm", f"{path} is not a complete {type(model).__name__} checkpoint: "
                                          f"{'; '.join(parts)} — was it saved from a model without a language-model head?")
    return model


def load_reference(cfg: PilotConfig):
    """The CPU reference model, in eval mode, in the pilot's dtype."""
    model = build_builtin(cfg) if cfg.model is None else load_checkpoint(
        cfg.model, cfg.torch_dtype, cfg.attn_implementation
    )
    return model.eval()


def to_device(model, device: torch.device):
    """A copy of ``model`` on ``device``; running out of device memory is a clear error."""
    try:
        return copy.deepcopy(model).to(device)
    except torch.OutOfMemoryError as exc:
        raise out_of_memory(device, exc) from None


def out_of_memory(device: torch.device, exc: BaseException) -> PilotError:
    first_line = (str(exc).strip().splitlines() or ["out of memory"])[0]
    return PilotError(
        "out_of_memory",
        f"out of memory on {device}: {first_line} — use a smaller batch/sequence, a lower precision, "
        "or an instance with more HBM per core",
    )


def describe(model) -> dict:
    config = model.config
    return {
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "num_hidden_layers": getattr(config, "num_hidden_layers", None),
        "hidden_size": getattr(config, "hidden_size", None),
        "vocab_size": getattr(config, "vocab_size", None),
        "attn_implementation": getattr(config, "_attn_implementation", None),
    }
