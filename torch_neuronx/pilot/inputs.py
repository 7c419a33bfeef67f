"""Known inputs: fixed prompts and token batches, saved with the report and reusable.

A pilot compares the device with the CPU on the *same* tokens, and a second
pilot (after a fix, or on other hardware) must see the same tokens again, so
everything the steps feed the model is built here once, written to
``inputs.json`` and can be read back with ``--inputs``.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..runtime.errors import first_line
from ..testing.tiny_models import byte_tokenizer
from .config import PilotError

INPUTS_SCHEMA = 1

# A short built-in text (written for this project) for prompts, perplexity and
# the optional fine-tune: no data set download is needed.
BUILTIN_TEXT = (
    "Moving a training or inference job to a new accelerator is mostly a matter of evidence. "
    "First the team fixes a set of inputs, so that every later run sees the same tokens. "
    "Then it compares the logits of the new device with a trusted reference, layer by layer, "
    "and decides in advance how large a difference is acceptable for each precision. "
    "Greedy generations are compared token by token, because a single flipped token changes "
    "everything that follows it. A short fine-tune shows whether gradients agree as well. "
    "The checkpoint is saved on the device and loaded again in a fresh process, and the outputs "
    "must be identical. Compilation is measured on its own: the first run of every new shape pays "
    "for it, and a warm cache should make the second process start quickly. Only then do latency, "
    "throughput and memory numbers mean something, and only then can the cost of a job be "
    "estimated from the measured time and the price of the instance."
)

class Tokenizer:
    """A Transformers tokenizer as the pilot uses it: plain text in, ids out, no special tokens added."""

    def __init__(self, tokenizer, name: str | None = None):
        self._tok = tokenizer
        self.name = name or type(tokenizer).__name__
        self.unk_token_id = tokenizer.unk_token_id

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids) -> str:
        return self._tok.decode(list(ids))


def builtin_tokenizer() -> Tokenizer:
    """The built-in model's tokenizer, needing no files: byte ``b`` is id ``3 + b``."""
    return Tokenizer(byte_tokenizer(), "byte-level (built-in)")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "merges.txt", "special_tokens_map.json")
MAX_UNKNOWN_SHARE = 0.1  # of the built-in text's tokens; a working tokenizer of any language model has none


def load_tokenizer(model_dir: str | None) -> tuple[object, str | None]:
    """The checkpoint's own tokenizer if it loads, else the byte-level one, and why the fallback (or None).

    A tokenizer that loads but cannot encode the built-in text (mostly its unknown
    token, e.g. a vocabulary-less tokenizer built from the config alone) is bad input:
    every prompt would be ``[UNK] [UNK] …`` and the report would describe nothing.
    """
    if model_dir is None:
        return builtin_tokenizer(), None
    present = [name for name in TOKENIZER_FILES if (Path(model_dir) / name).is_file()]
    if not present:  # a model saved without its tokenizer: Transformers would build one with no vocabulary
        return builtin_tokenizer(), "the checkpoint has no tokenizer files; using the built-in byte-level tokenizer"
    try:
        from transformers import AutoTokenizer

        tokenizer = Tokenizer(AutoTokenizer.from_pretrained(model_dir, local_files_only=True))
    except Exception as exc:
        return builtin_tokenizer(), (f"the checkpoint's tokenizer ({', '.join(present)}) does not load "
                                     f"({first_line(exc)}); using the built-in byte-level tokenizer instead")
    ids = tokenizer.encode(BUILTIN_TEXT)
    unk = tokenizer.unk_token_id
    unknown = sum(i == unk for i in ids) / len(ids) if ids and unk is not None else 0.0
    if not ids or unknown > MAX_UNKNOWN_SHARE:
        raise PilotError("bad_tokenizer", f"the tokenizer of {model_dir} ({tokenizer.name}) cannot encode the built-in "
                                          f"text: {unknown:.0%} of its tokens are the unknown token; save the model's "
                                          "own tokenizer into the checkpoint (tokenizer.save_pretrained), or remove its "
                                          f"tokenizer files ({', '.join(present)}) to use the built-in byte-level one")
    return tokenizer, None


@dataclasses.dataclass
class KnownInputs:
    tokenizer: str
    prompts: list[str]  # one per batch row, decoded from the token windows
    batches: dict[int, list[list[int]]]  # sequence length -> batch_size rows of token ids
    eval_ids: list[int]  # the built-in text, for loss / perplexity

    @property
    def batch_size(self) -> int:
        return len(next(iter(self.batches.values())))

    @property
    def seq_lens(self) -> list[int]:
        return sorted(self.batches)

    def to_json(self) -> dict:
        return {
            "schema": INPUTS_SCHEMA,
            "tokenizer": self.tokenizer,
            "prompts": self.prompts,
            "batches": {str(k): v for k, v in sorted(self.batches.items())},
            "eval_ids": self.eval_ids,
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json()))


def build_inputs(tokenizer, batch_size: int, seq_lens, eval_len: int) -> KnownInputs:
    """Token windows over the built-in text, one row per prompt, every row full length.

    Rows start at different offsets so a batch is not the same prompt repeated;
    the stream repeats cyclically when a length exceeds the text.
    """
    stream = tokenizer.encode(BUILTIN_TEXT)
    longest = max(max(seq_lens), eval_len)
    reps = (longest + batch_size * 37) // len(stream) + 2
    stream = stream * reps
    batches = {
        int(length): [stream[row * 37 : row * 37 + int(length)] for row in range(batch_size)]
        for length in seq_lens
    }
    prompts = [tokenizer.decode(row) for row in batches[min(batches)]]
    return KnownInputs(tokenizer.name, prompts, batches, stream[:eval_len])


def load_inputs(path: Path, vocab_size: int) -> KnownInputs:
    """Read ``--inputs``; a malformed file or an id outside the model's vocabulary is bad input."""
    try:
        data = json.loads(Path(path).read_text())
        batches = {int(k): v for k, v in data["batches"].items()}
        inputs = KnownInputs(str(data["tokenizer"]), list(data["prompts"]), batches,
                             [int(i) for i in data["eval_ids"]])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PilotError("bad_input", f"--inputs {path}: not a pilot inputs file ({exc})") from None
    if not batches:
        raise PilotError("bad_input", f"--inputs {path}: no token batches")
    for length, rows in batches.items():
        if not rows or any(len(r) != length for r in rows) or len(rows) != inputs.batch_size:
            raise PilotError(
                "bad_input",
                f"--inputs {path}: batch for length {length} is not {inputs.batch_size} rows of {length} ids",
            )
        bad = [i for r in rows for i in r if not 0 <= int(i) < vocab_size]
        if bad:
            raise PilotError(
                "bad_input",
                f"--inputs {path}: token id {bad[0]} is outside the model's vocabulary (size {vocab_size})",
            )
    if len(inputs.eval_ids) < 2 or any(not 0 <= i < vocab_size for i in inputs.eval_ids):
        raise PilotError("bad_input", f"--inputs {path}: eval_ids must be 2+ ids inside the vocabulary")
    return inputs
