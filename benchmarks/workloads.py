"""The measured workloads, written once against ``adapters.Adapter``.

Each returns ``{"metrics": {name: number or list of samples}, "info": {...}}``;
the runner pools samples across repeated processes and reports median and
min–max. Times are wall-clock and include the host→device copy of the batch,
as a training loop's would.
"""
from __future__ import annotations

import functools
import importlib.util
import sys
import time

import torch

from .model import Size, build_model, decode_prompt, padded_length, static_greedy, token_batch, varlen_lengths
from .report import in_thread_cpu_time
from .xla_env import REPO


def _load_decoding():
    """``torch_neuronx/testing/decoding.py`` (the decode loop and peak-RSS reading the pilot uses
    too), loaded by path: the PyTorch/XLA interpreter cannot import ``torch_neuronx`` (its C++
    extension is built for the project's torch), and the module needs only ``torch``."""
    spec = importlib.util.spec_from_file_location("_torchneuron_decoding",
                                                  REPO / "torch_neuronx" / "testing" / "decoding.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being defined
    spec.loader.exec_module(module)
    return module


decoding = _load_decoding()


class _Trainer:
    """Model, optimizer and one timed optimizer step on a given batch."""

    def __init__(self, adapter, size: Size):
        self.adapter = adapter
        self.model = adapter.place(build_model(size))
        self.model.train()
        self.forward = adapter.compile(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def step(self, ids, mask=None) -> tuple[float, float]:
        """Run one step; return (seconds, loss)."""
        device = self.adapter.device
        start = time.perf_counter()
        ids = ids.to(device)
        labels = ids
        if mask is not None:
            mask = mask.to(device)
            labels = ids.masked_fill(mask == 0, -100)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        self.optimizer.step()
        self.adapter.sync()
        value = loss.item()
        return time.perf_counter() - start, value


def _projection_metrics(first: dict | None, first_s: float, steady: dict | None, steady_s: float) -> dict:
    """The projected step time and the projection's own host cost relative to the eager step
    (on backends with a device model; every ``projected_`` figure is a projection, every
    ``projection_`` figure a host measurement of the projection's overhead): inside the
    steps (queueing new signatures, projecting compiled graphs) and deferred (projecting
    the queued signatures when the figures are read, outside the steps)."""
    if first is None or steady is None:
        return {}
    return {"projected_step_ms": steady["cost"].step_seconds * 1e3,
            "projected_step_usd": steady["cost"].run_usd,
            "projected_mfu_pct": (steady["mfu"] or 0.0) * 100,
            "projection_in_first_step_pct": first["in_run_seconds"] / first_s * 100,
            "projection_in_steady_steps_pct": steady["in_run_seconds"] / steady_s * 100,
            "projection_deferred_ms": (first["deferred_seconds"] + steady["deferred_seconds"]) * 1e3,
            "projection_deferred_vs_run_pct":
                (first["deferred_seconds"] + steady["deferred_seconds"]) / (first_s + steady_s) * 100}


def train(adapter, size: Size) -> dict:
    """Fixed-shape training: the first step (compiles) and steady-state steps."""
    decoding.reset_host_peak_rss()  # the peak of the training loop, not of the imports
    trainer = _Trainer(adapter, size)
    mark = adapter.projection_mark()
    first_s, first_loss = trainer.step(token_batch(size, size.seq, 0))
    first_projected = adapter.projected(mark)
    after_first, est_first = adapter.compilations(), adapter.estimated_compile_s()
    steady, losses = [], [first_loss]
    mark = adapter.projection_mark()
    for step in range(1, size.train_steps + 1):
        seconds, loss = trainer.step(token_batch(size, size.seq, step))
        steady.append(seconds * 1e3)
        losses.append(loss)
    projection = _projection_metrics(first_projected, first_s, adapter.projected(mark, size.train_steps),
                                     sum(steady) / 1e3)
    return {
        "metrics": {
            "first_step_ms": first_s * 1e3,
            "steady_step_ms": steady,
            "peak_rss_mb": decoding.host_peak_rss_bytes() / 2**20,
            "compilations": after_first,
            # Non-zero means every step keeps compiling (e.g. a scalar argument that changes).
            "steady_compilations": None if after_first is None else adapter.compilations() - after_first,
            "est_device_compile_s": est_first,  # what the real device would add to the first step
            **projection,
        },
        "info": {"losses": losses},
    }


def _varlen(adapter, size: Size, pad: bool) -> dict:
    trainer = _Trainer(adapter, size)
    lengths = varlen_lengths(size)
    before, est_before = adapter.compilations(), adapter.estimated_compile_s()
    total = 0.0
    for step, length in enumerate(lengths):
        ids = token_batch(size, length, step)
        mask = None
        if pad:
            width = padded_length(length, size.pad_multiple)
            mask = torch.zeros(size.batch, width, dtype=torch.long)
            mask[:, :length] = 1
            ids = torch.nn.functional.pad(ids, (0, width - length), value=0)
        seconds, _ = trainer.step(ids, mask)
        total += seconds
    after, est_after = adapter.compilations(), adapter.estimated_compile_s()
    shapes = sorted({padded_length(n, size.pad_multiple) if pad else n for n in lengths})
    return {
        "metrics": {
            "total_s": total,
            "compilations": None if before is None else after - before,
            "est_device_compile_s": None if est_before is None else est_after - est_before,
        },
        "info": {"lengths": lengths, "distinct_shapes": len(shapes)},
    }


def varlen(adapter, size: Size) -> dict:
    """Variable-length training, each batch at its own length."""
    return _varlen(adapter, size, pad=False)


def varlen_padded(adapter, size: Size) -> dict:
    """Variable-length training padded to a multiple of ``pad_multiple`` (few shapes)."""
    return _varlen(adapter, size, pad=True)


def _generate_once(adapter, forward, cache, prompt, new_tokens: int) -> tuple[float, list, list]:
    """Greedy decoding on the reset static cache (the shared loop; positions left to the model,
    as users call it); returns (TTFT s, per-token s list, tokens of the one prompt)."""
    cache.reset()
    run = decoding.greedy_decode(forward, prompt, new_tokens, {"cache": cache}, adapter.device, adapter.sync,
                                 positions=False)
    return run.ttft_seconds, run.per_token_seconds, run.tokens[0].tolist()


def generate(adapter, size: Size) -> dict:
    """Greedy generation: a cold request (includes compiles), a warm-up, then ``decode_requests``
    measured warm ones (the projection covers the first of them).

    Every path decodes into a static KV cache: a growing cache changes shapes
    each token, which recompiles per token on Trainium, the XLA path and
    ``torch.compile``; using it everywhere keeps the ratios like-for-like.
    """
    from transformers import StaticCache

    model = adapter.place(build_model(size))
    model.eval()
    forward = adapter.compile(model)
    cache = StaticCache(config=model.config, max_cache_len=size.prompt + size.new_tokens)
    prompt = decode_prompt(size)
    before = adapter.compilations()
    ttft_cold, _, _ = _generate_once(adapter, forward, cache, prompt, size.new_tokens)
    # The first request fills a lazily allocated cache; a graph traced before that differs
    # from later ones, so compiled paths recompile prefill once more in the second request.
    _generate_once(adapter, forward, cache, prompt, size.new_tokens)
    after = adapter.compilations()
    ttfts, per_token, tokens_per_s = [], [], []
    mark = adapter.projection_mark()
    for request in range(size.decode_requests):
        ttft, request_per_token, tokens = _generate_once(adapter, forward, cache, prompt, size.new_tokens)
        if request == 0:
            projected = adapter.projected(mark)  # one request's device work, read between requests
        ttfts.append(ttft * 1e3)
        per_token += [t * 1e3 for t in request_per_token]
        tokens_per_s.append(size.new_tokens / (ttft + sum(request_per_token)))
    warm = None if after is None else adapter.compilations() - after
    return {
        "metrics": {
            "ttft_cold_ms": ttft_cold * 1e3,
            "ttft_ms": ttfts,
            "per_token_ms": per_token,
            "tokens_per_s": tokens_per_s,
            "compilations": None if before is None else after - before,
            "warm_compilations": warm,  # should be 0: the measured requests reuse everything
            **({"projected_request_ms": projected["seconds"] * 1e3,
                "projected_tokens_per_s": size.new_tokens / projected["seconds"]} if projected else {}),
        },
        "info": {"tokens": tokens},
    }


class _TokenClock:
    """A ``generate()`` streamer that timestamps each token as it is produced.

    ``generate`` hands it the prompt first, then one token per decoding step,
    so the gaps give time to first token and per-token latency of the
    library's own loop (mask construction, stopping criteria and all).
    """

    def __init__(self, adapter):
        self.adapter = adapter
        self.stamps: list[float] = []

    def put(self, value) -> None:
        self.adapter.sync()
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


def generate_static(adapter, size: Size) -> dict:
    """``model.generate(cache_implementation="static")``, greedy, batch 1, uncompiled.

    The path users take: Transformers builds the static cache, the masks and
    the cache positions itself. Transformers would auto-compile it on some
    devices; ``disable_compile`` keeps this row eager on every backend. After a
    warm-up request, ``decode_requests`` measured ones, as in ``generate``: one
    request of a few milliseconds per token is too short a sample for a process's
    median, and the paired ratio divides two such medians.
    """
    model = adapter.place(build_model(size))
    model.eval()
    prompt = decode_prompt(size).to(adapter.device)
    ttfts, per_token, tokens_per_s = [], [], []
    with torch.no_grad():
        _static_generate_once(adapter, model, prompt, size.new_tokens)  # warm-up: builds the cache, compiles kernels
        for _ in range(size.decode_requests):
            ttft, times, tokens, total = _static_generate_once(adapter, model, prompt, size.new_tokens)
            ttfts.append(ttft * 1e3)
            per_token += [t * 1e3 for t in times]
            tokens_per_s.append(size.new_tokens / total)
    return {
        "metrics": {"ttft_ms": ttfts, "per_token_ms": per_token, "tokens_per_s": tokens_per_s},
        "info": {"tokens": tokens},
    }


def _static_generate_once(adapter, model, prompt, new_tokens: int) -> tuple[float, list, list, float]:
    """One greedy ``model.generate(cache_implementation="static")`` request, uncompiled
    (``disable_compile``); returns (TTFT s, per-token s list, tokens generated, request s)."""
    model.generation_config.disable_compile = True
    clock = _TokenClock(adapter)
    start = time.perf_counter()
    out = model.generate(prompt, streamer=clock, **static_greedy(new_tokens))
    stamps = clock.stamps  # [prompt, token 1, token 2, ...]
    return (stamps[1] - start, [b - a for a, b in zip(stamps[1:], stamps[2:])],
            out[0, prompt.shape[1]:].tolist(), stamps[-1] - start)


def decode_in_process(adapter, size: Size) -> dict:
    """The two eager decode rows with both devices in one process: ``bench_compile``'s eager
    decode, CPU and neuron requests alternating for ``decode_rounds`` rounds. Its ratio per
    process (geometric mean of the rounds' ratios) leaves out the ±5-10 % by which one
    process's medians differ from another's, the noise a pair of processes carries; the
    report's one-process targets pool these ratios over processes. ``decode`` builds one model
    per device with its own adapters (neuron eager with accounting on, as ``adapter``)."""
    from .bench_compile import decode

    return _one_process_cell(decode(size.decode_rounds, compiled=False, size=size), "cpu")


def compiled_in_process(adapter, size: Size) -> dict:
    """The two compiled rows with both backends in one process, as ``decode_in_process``
    for the eager ones: ``bench_compile``'s training step and static-cache decode loop, CPU
    Inductor and neuron compiled alternating for ``decode_rounds`` rounds each. It builds its
    own adapters (neuron compiled, as ``adapter``); on a warm round both find their compiled
    graphs in the cache directories the round-one process filled."""
    from .bench_compile import decode, train

    measured = {}
    for measure in (train, functools.partial(decode, compiled=True)):
        # Dynamo's state of the model's forward as in a fresh process: after the training graphs,
        # the decode's other shapes would count as recompiles (dynamic shapes, recompile limit).
        torch._dynamo.reset()
        measured |= measure(size.decode_rounds, size=size)
    calls = measured.pop("host_calls_per_request")
    cell = _one_process_cell(measured, "inductor")
    cell["info"]["host_calls_per_request"] = calls
    return cell


def _one_process_cell(measured: dict, reference: str) -> dict:
    """``bench_compile``'s one-process rows as a suite cell: per path (``loop``, ``train``, ...)
    its ratio (``<path>_ratio``, the metric the report's one-process targets read) and both sides'
    medians; in ``info``, the ratio's interval and whether both sides computed the same thing
    (``same_*``: the report gives no ratio for a process where they did not)."""
    metrics, info = {}, {}
    for what, row in measured.items():
        ratio, low, high = row[f"neuron_over_{reference}"]
        metrics[f"{what}_ratio"] = ratio
        for name, by_side in row.items():
            if name.endswith("_ms"):
                metrics |= {f"{what}_{side}_{name}": ms for side, ms in by_side.items()}
        info[what] = {name: value for name, value in row.items() if name.startswith("same_")}
        info[what]["ratio_interval"] = [low, high]
    return {"metrics": metrics, "info": info}


def ops(adapter, size: Size) -> dict:
    """Per-op dispatch overhead on small tensors, in microseconds per op.

    Each op is timed twice over the same loops: wall clock (``<op>_us``, what
    the suite's limits are on) and the thread's CPU time (``<op>_thread_us``),
    which leaves out the time other processes took the core, so a shared
    machine disturbs it less. On the lazy XLA path the loop only records ops;
    the closing sync runs them, so its figure is tracing plus one graph
    execution per repeat.
    """
    device = adapter.device
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=gen).to(device)
    b = torch.randn(64, 64, generator=gen).to(device)
    c = torch.zeros(64, 64).to(device)
    filled = torch.zeros(64, 64).to(device)
    cases = {
        "add_us": lambda: a + b,
        "mul_us": lambda: a * b,
        "fill_us": lambda: filled.fill_(1.0),
        "mm64_us": lambda: a @ b,
        "view_inplace_us": lambda: c.view(-1).add_(1.0),
        "atan2_us": lambda: torch.atan2(a, b),  # no device kernel: the boxed CPU fallback runs it
    }
    metrics = {}
    for name, op in cases.items():
        for _ in range(min(size.op_iters, 50)):
            op()
        adapter.sync()
        samples, thread_samples = [], []
        for _ in range(size.op_repeats):
            start, thread_start = time.perf_counter(), time.thread_time()
            for _ in range(size.op_iters):
                op()
            adapter.sync()
            samples.append((time.perf_counter() - start) / size.op_iters * 1e6)
            thread_samples.append((time.thread_time() - thread_start) / size.op_iters * 1e6)
        metrics[name] = samples
        metrics[in_thread_cpu_time(name)] = thread_samples
    return {"metrics": metrics, "info": {}}


WORKLOADS = {
    "train": train,
    "varlen": varlen,
    "varlen_padded": varlen_padded,
    "generate": generate,
    "generate_static": generate_static,
    "decode_in_process": decode_in_process,
    "compiled_in_process": compiled_in_process,
    "ops": ops,
}
