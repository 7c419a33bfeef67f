"""Which model a plan is for: a Transformers config from a bundled name, a
``config.json`` path or a checkpoint directory — hyperparameters only, no weights."""
from __future__ import annotations

import json
from pathlib import Path

from ..runtime.errors import UsageError

BUNDLED_DIR = Path(__file__).with_name("configs")
# the sizes a plan divides by or multiplies with; a zero or negative one is a broken config
SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "intermediate_size", "vocab_size", "head_dim")


def bundled_names() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.json"))


def load_config(model: str):
    """The ``PretrainedConfig`` of ``model``; a bad name, file or model type is a ``UsageError``."""
    from transformers import AutoConfig

    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    elif not path.exists():
        bundled = BUNDLED_DIR / f"{model}.json"
        if not bundled.exists():
            raise UsageError(f"model {model!r} is neither a config.json, a checkpoint directory nor a "
                             f"bundled config ({', '.join(bundled_names())})")
        path = bundled
    if not path.is_file():
        raise UsageError(f"no config.json in {model!r}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not data.get("model_type"):
        raise UsageError(f"{path} has no \"model_type\": plan needs a Transformers config.json "
                         "(e.g. \"model_type\": \"llama\")")
    for field in SIZE_FIELDS:
        n = data.get(field)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise UsageError(f"{path}: {field} = {n!r} must be a whole number >= 1")
    model_type = data.pop("model_type")
    try:
        config = AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
        raise UsageError(f"{path}: unknown or unsupported model type {model_type!r} "
                         f"({str(exc).splitlines()[0][:200]})") from None
    return config


def model_kind(config) -> str:
    """``decoder`` (a causal LM: prefill, then one token per step), ``encoder`` (one forward of the
    batch: BERT, RoBERTa, DistilBERT, ...) or ``encoder-decoder``; read from the class the config
    names (``architectures``), else from its ``model_type``."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    names = getattr(config, "architectures", None) or ()
    if names:
        return "decoder" if any(n.endswith(("CausalLM", "LMHeadModel")) for n in names) else "encoder"
    causal = config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return "decoder" if causal and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "encoder"
