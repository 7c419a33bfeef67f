"""Which upstream test files run: a target is one file of one library, optionally narrowed by ``-k``."""
from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Target:
    library: str
    path: str  # relative to the suite directory, e.g. tests/models/llama/test_modeling_llama.py
    keyword: str = ""  # a pytest -k expression; empty runs the whole file

    @property
    def label(self) -> str:
        return f"{self.path} -k '{self.keyword}'" if self.keyword else self.path

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "_", f"{self.library} {self.label}").strip("_")


# The default selection: the causal-LM model tests of the most used families (Llama, GPT-2), and
# files of Accelerate, PEFT and TRL that build their models locally (the runs are offline).
DEFAULT = (
    Target("transformers", "tests/models/llama/test_modeling_llama.py"),
    Target("transformers", "tests/models/gpt2/test_modeling_gpt2.py"),
    Target("accelerate", "tests/test_big_modeling.py"),
    Target("accelerate", "tests/test_state_checkpointing.py"),
    Target("peft", "tests/test_custom_models.py",
           "MLP and LoRA and (test_forward_output_finite or test_forward_float16 or test_safe_merge or "
           "test_only_params_are_updated or test_save_load_roundtrip or test_peft_model_device_map)"),
    Target("peft", "tests/test_custom_models.py", "MLP and LoRA and test_load_model_low_cpu_mem_usage"),
    Target("trl", "tests/test_activation_offloading.py"),
    Target("trl", "tests/test_model_utils.py"),
    Target("trl", "tests/test_callbacks.py"),
)


def parse(text: str) -> Target:
    """``LIBRARY:PATH`` or ``LIBRARY:PATH -k EXPRESSION``."""
    library, sep, rest = text.partition(":")
    if not sep or not library or not rest:
        raise ValueError(f"--select {text!r}: expected LIBRARY:PATH[ -k EXPRESSION]")
    path, _, keyword = rest.partition(" -k ")
    return Target(library.strip(), path.strip(), keyword.strip().strip("'\""))
