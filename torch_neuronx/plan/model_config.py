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


def check_tp(config, tp: int) -> None:
    """TP shards attention heads and the MLP evenly; KV heads are split evenly, or replicated
    when TP is a multiple of them (as NxD does). TP > 1 needs the model's own TP plan."""
    if tp > 1 and not getattr(config, "base_model_tp_plan", None):
        raise UsageError(f"model type {config.model_type!r} has no tensor-parallel plan in Transformers: "
                         "use --tp 1 (TP needs a model that defines one: llama, qwen2, mistral, ...)")
    for field in ("num_attention_heads", "intermediate_size"):
        n = getattr(config, field, None)
        if n is not None and n % tp:
            raise UsageError(f"--tp {tp} does not divide {field}={n} of the model")
    kv = getattr(config, "num_key_value_heads", None)
    if kv is not None and kv % tp and tp % kv:
        raise UsageError(f"--tp {tp} neither divides nor is a multiple of num_key_value_heads={kv} of the model")
