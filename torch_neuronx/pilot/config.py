"""Options of a pilot run, their validation, and the pass/fail tolerances per dtype."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from ..runtime.errors import UsageError
from ..runtime.spellings import closest, dtype_name, pick

MODES = ("eager", "compile", "both")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
OPTIMIZERS = ("adamw", "sgd")
LR_SCHEDULES = ("constant", "linear", "cosine")


class PilotError(Exception):
    """Bad input or an environment problem: reported in one line, never as a traceback.

    ``kind`` names the class of problem (``bad_input``, ``not_causal_lm``, ``bad_tokenizer``,
    ``out_of_memory``, ``unsupported_dtype``, ``device_unavailable``; an environment
    variable is a ``ConfigError``, kind ``configuration``) so the report and tests can
    tell them apart.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Limits a device result must meet against the CPU reference in the same dtype.

    Logits pass when ``|device - cpu| <= atol + rtol * |cpu|`` everywhere (as
    ``torch.allclose``); greedy generations pass when at least
    ``min_token_agreement`` of generated tokens equal CPU's; losses pass when
    their relative difference is at most ``loss_rtol``.
    """

    atol: float
    rtol: float
    min_token_agreement: float
    loss_rtol: float


# float32 is expected to agree closely with the CPU; half precisions round
# differently per kernel, and a near-tie in greedy decoding then flips a token
# and everything after it, so they get looser limits.
TOLERANCES = {
    "float32": Tolerance(atol=1e-4, rtol=1e-4, min_token_agreement=1.0, loss_rtol=1e-4),
    "bfloat16": Tolerance(atol=5e-2, rtol=5e-2, min_token_agreement=0.75, loss_rtol=2e-2),
    "float16": Tolerance(atol=1e-2, rtol=1e-2, min_token_agreement=0.75, loss_rtol=1e-2),
}


@dataclasses.dataclass
class PilotConfig:
    model: str | None = None  # local checkpoint directory; None = built-in tiny Llama
    device: str = "neuron"
    dtype: str = "float32"
    attn_implementation: str = "sdpa"
    batch_size: int = 2
    seq_lens: tuple[int, ...] = (32, 64)
    gen_tokens: int = 16
    mode: str = "eager"
    train_steps: int = 8
    optimizer: str = "adamw"  # of the fine-tune step
    lr_schedule: str = "constant"  # linear / cosine change the learning rate every step
    iters: int = 8  # timed repetitions per shape for the latency percentiles
    hidden_states: bool = True  # per-layer error via hooks
    instance: str | None = None
    price_per_hour: float | None = None
    hbm_per_core_gib: float | None = None  # emulate a smaller (or larger) NeuronCore
    out: Path = Path("pilot-report")
    inputs: Path | None = None
    seed: int = 0

    @property
    def modes(self) -> tuple[str, ...]:
        return ("eager", "compile") if self.mode == "both" else (self.mode,)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def tolerance(self) -> Tolerance:
        return TOLERANCES[self.dtype]

    def validate(self) -> None:
        """Raise :class:`PilotError` for any option the pilot cannot use."""
        try:
            self.dtype = dtype_name(self.dtype)
        except UsageError as exc:
            raise PilotError("unsupported_dtype", f"{exc} (Trainium has no 64-bit floating point)") from None
        if self.mode not in MODES:
            raise PilotError("bad_input", f"--mode {self.mode!r} must be one of {', '.join(MODES)}")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise PilotError(
                "bad_input",
                f"--attn {self.attn_implementation!r} must be one of {', '.join(ATTN_IMPLEMENTATIONS)}",
            )
        for name, choices in (("optimizer", OPTIMIZERS), ("lr_schedule", LR_SCHEDULES)):
            if getattr(self, name) not in choices:
                raise PilotError("bad_input", f"--{name.replace('_', '-')} {getattr(self, name)!r} must be one of "
                                              f"{', '.join(choices)}")
        for name in ("batch_size", "gen_tokens", "iters"):
            if getattr(self, name) < 1:
                raise PilotError("bad_input", f"--{name.replace('_', '-')} must be at least 1")
        if self.iters < 2:
            raise PilotError("bad_input", "--iters must be at least 2 (one cold run, then steady state)")
        if self.train_steps < 0:
            raise PilotError("bad_input", "--train-steps must be 0 (no fine-tune) or more")
        if not self.seq_lens or min(self.seq_lens) < 2:
            raise PilotError("bad_input", "--seq-lens must list lengths of at least 2 tokens")
        for name, option in (("price_per_hour", "--price-per-hour"), ("hbm_per_core_gib", "--hbm-per-core")):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise PilotError("bad_input", f"{option} must be a positive, finite number (got {value})")
        from ..runtime.profiles import PROFILES

        try:
            if self.instance is not None:
                self.instance = pick(self.instance, PROFILES, "--instance")
        except UsageError as exc:
            raise PilotError("bad_input", str(exc)) from None
        if self.model is not None and not Path(self.model).is_dir():
            raise PilotError(
                "bad_input",
                f"model path {self.model!r} is not a directory; pass a local Transformers "
                "checkpoint directory (no downloads), or omit MODEL for the built-in default"
                + _near_directory(Path(self.model)),
            )
        if self.inputs is not None and not Path(self.inputs).is_file():
            raise PilotError("bad_input", f"--inputs file {str(self.inputs)!r} does not exist")

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["seq_lens"] = list(self.seq_lens)
        data["out"] = str(self.out)
        data["inputs"] = str(self.inputs) if self.inputs else None
        return data


def _near_directory(path: Path) -> str:
    """``"; did you mean './my-gpt2'?"`` for a directory beside ``path`` whose name is close."""
    parent = path.parent if str(path.parent) else Path(".")
    try:
        siblings = {p.name: p for p in parent.iterdir() if p.is_dir()}
    except OSError:
        return ""
    near = closest(path.name, siblings)
    return f"; did you mean {str(parent / near)!r}?" if near else ""
