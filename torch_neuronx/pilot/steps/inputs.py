"""Step "Known inputs": the token batches every other step feeds the model, saved for reruns."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ...html_report.markup import e
from ..config import PilotConfig, PilotError
from ..inputs import KnownInputs, build_inputs, load_inputs, load_tokenizer
from ..model import describe, load_reference

TITLE = "Known inputs"


@dataclasses.dataclass
class InputsResult:
    file: str
    origin: str
    tokenizer: str
    batch_size: int
    seq_lens: list[int]
    eval_tokens: int
    prompts: list[str]
    tokenizer_note: str | None = None  # why the checkpoint's own tokenizer is not the one used

    def to_data(self) -> dict:
        return dataclasses.asdict(self)


def run(cfg: PilotConfig, vocab_size: int, tokenizer, tokenizer_note: str | None,
        workdir: Path) -> tuple[InputsResult, KnownInputs]:
    if cfg.inputs:
        known = load_inputs(cfg.inputs, vocab_size)
        origin = f"loaded from {cfg.inputs}"
    else:
        known = build_inputs(tokenizer, cfg.batch_size, cfg.seq_lens, eval_len=max(cfg.seq_lens))
        origin = "built from the built-in text"
        largest = max(i for rows in known.batches.values() for r in rows for i in r)
        if largest >= vocab_size:
            raise PilotError("bad_tokenizer", f"the {known.tokenizer} tokenizer gives ids up to {largest}, outside the "
                                              f"model's vocabulary of {vocab_size}; save the model's own tokenizer "
                                              "into the checkpoint (tokenizer.save_pretrained)")
    path = workdir / "inputs.json"
    known.save(path)
    result = InputsResult(path.name, origin, known.tokenizer, known.batch_size, known.seq_lens,
                          len(known.eval_ids), known.prompts, tokenizer_note)
    return result, known


def run_once(ctx) -> None:
    """Load the model on the CPU (the reference), then its tokenizer and the known inputs."""
    cfg = ctx.cfg
    with ctx.part(" (load model)"):
        ctx.reference = load_reference(cfg)
        ctx.recorder.report.model = {"source": cfg.model or "built-in tiny Llama (random weights, fixed seed)",
                                     **describe(ctx.reference)}
    if ctx.section.status == "error":
        return
    with ctx.part(" (prepare)"):
        ctx.tokenizer, note = load_tokenizer(cfg.model)
        if note:
            ctx.ui.note(note)
        ctx.section.result, ctx.known = run(cfg, ctx.reference.config.vocab_size, ctx.tokenizer, note, ctx.workdir)


def summary(r: InputsResult) -> str:
    text = f"{r.batch_size} × {r.seq_lens} tokens {r.origin}; saved to {r.file} (reuse with --inputs)"
    return text + (f"; note: {r.tokenizer_note}" if r.tokenizer_note else "")


def html(data: dict) -> str:
    if not data.get("prompts"):
        return ""
    prompts = "".join(f"<li><code>{e(p[:160])}</code></li>" for p in data.get("prompts", []))
    return (f"<p>Tokenizer: {e(data.get('tokenizer'))}; batch {e(data.get('batch_size'))} × lengths "
            f"{e(data.get('seq_lens'))}; file <code>{e(data.get('file'))}</code>.</p>"
            + (f"<p class='banner'>{e(data['tokenizer_note'])}</p>" if data.get("tokenizer_note") else "")
            + f"<ol>{prompts}</ol>")
