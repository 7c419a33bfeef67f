"""Developer tools that are not benchmarks: they investigate, generate or compare, and assert nothing.

Each is run as ``python -m tools.<name>`` from the repository root; ``tools/README.md`` lists them.
"""
