"""Qwen-style text generation on ``neuron`` with a static cache and a compiled forward.

Everything is plain Transformers: ``generate`` sees a ``StaticCache`` on a ``neuron``
model and compiles the forward with the ``neuron`` backend (static shapes). The
prompt is padded to a fixed length and the cache has an explicit maximum
sequence length, so the whole run needs exactly two graphs: one prefill, one
decode step. The script prints first-token latency, per-token latency,
tokens/s (host times here), the same request projected on one Trainium
NeuronCore (docs/projection.md; not on Trainium, where the times are the device's) and the compilation counts of ``torch.neuron.get_dynamo_metrics()``.

Here (emulated cores, a one-layer tiny Qwen3 built from its config)::

    python examples/inference_static_cache.py

On Trainium with a real checkpoint::

    python examples/inference_static_cache.py --model Qwen/Qwen3-8B --dtype bfloat16 \\
        --prompt-len 512 --max-seq-len 2048 --max-new-tokens 256
"""
from __future__ import annotations

import argparse
import time

import torch


class TokenClock:
    """A ``generate`` streamer that records when each token is emitted (the
    first ``put`` is the prompt)."""

    def __init__(self):
        self.stamps: list[float] = []

    def put(self, value):
        self.stamps.append(time.perf_counter())

    def end(self):
        pass


def run(model, prompt_ids, max_seq_len: int, max_new_tokens: int, compile_forward: bool):
    """One ``generate`` call; returns the tokens and the token timestamps."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_seq_len)
    clock = TokenClock()
    start = time.perf_counter()
    out = model.generate(
        prompt_ids,
        attention_mask=torch.ones_like(prompt_ids),
        cache=cache,
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        do_sample=False,
        # The prompt runs as one chunk through the same compiled forward.
        prefill_chunk_size=prompt_ids.shape[1] if compile_forward else None,
        disable_compile=not compile_forward,
        streamer=clock,
    )
    return out, start, clock.stamps[1:]


def report(label, start, stamps, batch, projected):
    """Measured times; on the emulator (``projected`` given) they are host times, and the same
    request is also projected on one Trainium NeuronCore by its device model (docs/projection.md)."""
    first = stamps[0] - start
    per_token = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)
    tokens_per_s = batch * len(stamps) / (stamps[-1] - start)
    where = "host, the emulator" if projected else "measured"
    print(f"{label}: first-token {first * 1e3:.1f} ms, per-token {per_token * 1e3:.2f} ms, "
          f"{tokens_per_s:.1f} tokens/s ({where})")
    if projected:
        seconds = projected.step.seconds
        print(f"{label}: projected on one NeuronCore: request {seconds * 1e3:.2f} ms, "
              f"{batch * len(stamps) / seconds:.0f} generated tokens per second (projected)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="checkpoint directory or Hub id; default: a tiny Qwen3")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, default=16, help="prompts are padded to this length")
    parser.add_argument("--max-seq-len", type=int, default=64, help="static cache length")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--runs", type=int, default=2, help="the first run includes compilation")
    parser.add_argument("--no-compile", action="store_true", help="eager forward (reference)")
    args = parser.parse_args(argv)
    if args.prompt_len + args.max_new_tokens > args.max_seq_len:
        parser.error("--prompt-len + --max-new-tokens must fit in --max-seq-len")

    from transformers import AutoModelForCausalLM

    from torch_neuronx.testing.tiny_models import tiny_qwen3

    try:  # the emulator's device model; the real product has none (its times are the device's)
        from torch_neuronx.accounting import projected
    except ImportError:
        projected = None

    torch._dynamo.config.automatic_dynamic_shapes = False
    dtype = getattr(torch, args.dtype)
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, device_map="neuron")
    else:
        model = tiny_qwen3(num_hidden_layers=1).to(device="neuron", dtype=dtype)
    model.eval()
    vocab = model.config.vocab_size
    prompt = torch.randint(3, vocab, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to("neuron")

    outputs = []
    for i in range(args.runs):
        torch.neuron.reset_dynamo_metrics()
        mark = projected.mark() if projected else None
        out, start, stamps = run(model, prompt, args.max_seq_len, args.max_new_tokens, not args.no_compile)
        metrics = torch.neuron.get_dynamo_metrics()
        report(f"run {i}", start, stamps, args.batch, projected.since(mark) if projected else None)
        print(f"run {i}: compiled graphs +{metrics['graphs_compiled']}, "
              f"recompiles +{metrics['recompilations']}, compile {metrics['compile_seconds']:.1f} s, "
              f"executions {metrics['executions']}")
        outputs.append(out)
    if not all(torch.equal(o, outputs[0]) for o in outputs):
        raise SystemExit("the runs generated different tokens")
    print("tokens:", outputs[0][0, args.prompt_len:].tolist())
    return outputs[0]


if __name__ == "__main__":
    main()
