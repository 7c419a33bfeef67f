"""Benchmark suite: ``neuron`` eager and compiled vs native CPU PyTorch and PyTorch/XLA.

``python -m benchmarks`` runs every workload on every backend, each in a fresh
process, and writes ``bench-results/results.{json,md}``. See ``docs/benchmarks.md``.
Nothing here imports ``torch`` at package level: the runner only launches workers.
"""
