"""Step "Output quality vs CPU": greedy generations token by token, and the loss on the built-in text."""
from __future__ import annotations

import dataclasses
import math

import torch

from ...html_report.markup import e, num, table
from ..config import Tolerance
from ..report.schema import Check

TITLE = "Output quality vs CPU"


@dataclasses.dataclass
class QualityResult:
    generation: dict[str, dict] = dataclasses.field(default_factory=dict)  # mode -> tokens, agreement, texts
    perplexity: dict | None = None

    def to_data(self) -> dict:
        data = {"generation": dict(self.generation)} if self.generation else {}
        if self.perplexity is not None:
            data["perplexity"] = self.perplexity
        return data


RESULT = QualityResult  # made empty before the first mode: a step no mode reached says so


@torch.no_grad()
def greedy_tokens(model, ids: torch.Tensor, new_tokens: int, pad_token_id: int) -> list[list[int]]:
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
        min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad_token_id,
        # A static KV cache keeps decode shapes fixed (one compilation, not one per
        # length); our own torch.compile wraps forward in compile mode, so
        # Transformers must not compile on its own.
        cache_implementation="static", disable_compile=True,
    )
    return out[:, ids.shape[1]:].tolist()


def run_generation(result: QualityResult, mode: str, ref_model, dev_model, rows: list[list[int]], new_tokens: int,
                   device, tol: Tolerance, tokenizer, greedy=greedy_tokens) -> list[Check]:
    """Greedy generations (``greedy(model, ids, n, pad)``) compared token by token, first divergence per row."""
    ids = torch.tensor(rows)
    pad = getattr(ref_model.generation_config, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else 0
    ref = greedy(ref_model, ids, new_tokens, pad)
    dev = greedy(dev_model, ids.to(device), new_tokens, pad)
    matches = sum(a == b for r, d in zip(ref, dev) for a, b in zip(r, d))
    total = sum(len(r) for r in ref)
    agreement = matches / total if total else 1.0
    result.generation[mode] = {
        "method": getattr(greedy, "__name__", str(greedy)),
        "cpu_tokens": ref, "device_tokens": dev, "token_agreement": agreement,
        "first_divergence": [next((i for i, (a, b) in enumerate(zip(r, d)) if a != b), None)
                             for r, d in zip(ref, dev)],
        "cpu_text": [tokenizer.decode(r) for r in ref],
        "device_text": [tokenizer.decode(d) for d in dev],
    }
    return [Check(f"{mode} greedy tokens match CPU", agreement >= tol.min_token_agreement, agreement,
                  tol.min_token_agreement)]


def _safe_exp(x: float) -> float | None:
    return math.exp(x) if x < 700 else None


@torch.no_grad()
def run_perplexity(result: QualityResult, mode: str, ref_model, dev_model, eval_ids: list[int], device,
                   tol: Tolerance) -> list[Check]:
    ids = torch.tensor([eval_ids])
    ref_loss = ref_model(input_ids=ids, labels=ids).loss.float().item()
    dev_ids = ids.to(device)
    dev_loss = dev_model(input_ids=dev_ids, labels=dev_ids).loss.float().item()
    rel = abs(dev_loss - ref_loss) / max(abs(ref_loss), 1e-12)
    result.perplexity = {"tokens": len(eval_ids), "cpu_loss": ref_loss, "device_loss": dev_loss,
                         "cpu_perplexity": _safe_exp(ref_loss), "device_perplexity": _safe_exp(dev_loss),
                         "relative_difference": rel}
    return [Check(f"{mode} loss on built-in text matches CPU", rel <= tol.loss_rtol, rel, tol.loss_rtol)]


def run_mode(ctx, mode: str) -> None:
    """Greedy generations of the shortest known batch. Eager: Transformers' generate, the users'
    path. Compile: the timed static-cache loop, whose graphs the performance step reuses
    (generate would compile its own on top)."""
    from ..perf import greedy_static

    greedy = greedy_static if mode == "compile" else greedy_tokens
    known = ctx.known
    with ctx.part(f" (greedy, {mode})"):
        ctx.add_checks(run_generation(ctx.section.result, mode, ctx.reference, ctx.model,
                                      known.batches[min(known.batches)], ctx.cfg.gen_tokens, ctx.device,
                                      ctx.cfg.tolerance, ctx.tokenizer, greedy))


def run_once(ctx) -> None:
    """The loss on the built-in text, once, after the modes (the eager model)."""
    with ctx.part(" (perplexity)"):
        ctx.add_checks(run_perplexity(ctx.section.result, "eager", ctx.reference, ctx.model, ctx.known.eval_ids,
                                      ctx.device, ctx.cfg.tolerance))


def summary(r: QualityResult) -> str:
    text = ", ".join(f"{m}: {g['token_agreement']:.0%} greedy tokens match" for m, g in r.generation.items())
    ppl = r.perplexity
    return text + (f"; loss {ppl['device_loss']:.4f} vs CPU {ppl['cpu_loss']:.4f}" if ppl else "")


def html(data: dict) -> str:
    out = []
    for mode, g in data.get("generation", {}).items():
        rows = [[e(i), e(div if div is not None else "none"), f"<code>{e(ct)}</code><br><code>{e(c)}</code>",
                 f"<code>{e(dt)}</code><br><code>{e(d)}</code>"]
                for i, (div, c, d, ct, dt) in enumerate(zip(g["first_divergence"], g["cpu_text"], g["device_text"],
                                                            g["cpu_tokens"], g["device_tokens"]))]
        out.append(f"<h3>Greedy generation ({e(mode)}): {g['token_agreement']:.0%} of tokens match CPU</h3>")
        out.append(table(["row", "first divergence", "CPU continuation (ids, text)",
                          "device continuation (ids, text)"], rows))
    ppl = data.get("perplexity")
    if ppl:
        out.append(table(["", "loss", "perplexity"], [
            ["CPU", num(ppl["cpu_loss"], "{:.6f}"), num(ppl["cpu_perplexity"], "{:.3f}")],
            ["device", num(ppl["device_loss"], "{:.6f}"), num(ppl["device_perplexity"], "{:.3f}")]]))
        out.append(f'<p class="muted">On the {ppl["tokens"]}-token built-in text. A randomly initialised model has a '
                   "perplexity near its vocabulary size; what matters is that device and CPU agree.</p>")
    return "".join(out)
