"""A working directory for TorchTitan's llama3 debug model, offline.

TorchTitan's ``llama3_debugmodel`` reads its tokenizer from ``./tests/assets/tokenizer`` and
its ``c4_test`` dataset from ``./tests/assets/c4_test``, relative to the working directory;
the torchtitan wheel ships neither. ``prepare(directory)`` writes both:

- the tokenizer: TorchTitan's own test tokenizer (byte-level BPE, 2,000 tokens and its
  special tokens), ``tokenizer/`` next to this file, copied unchanged from the
  ``pytorch/torchtitan`` repository (``tests/assets/tokenizer`` at commit b5bcd76; BSD-3-Clause,
  ``tokenizer/LICENSE``);
- the dataset: a small local text file, one sample per line: the help topics that ship
  with Python (``pydoc_data.topics``), every line longer than 40 characters (about 6,000
  lines, 380 kB). TorchTitan's ``c4_test`` loader reads a directory with ``datasets``, which
  takes a ``.txt`` file as one ``text`` sample per line.

Run from the repository root: ``python examples/torchtitan/workspace.py DIR``; then start
TorchTitan with ``DIR`` as the working directory (docs/torchtitan.md).
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

TOKENIZER = Path(__file__).resolve().parent / "tokenizer"
MIN_LINE = 40


def dataset_lines() -> list[str]:
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    return [line.strip() for name in sorted(topics) for line in topics[name].splitlines()
            if len(line.strip()) > MIN_LINE]


def prepare(directory: Path) -> Path:
    """Write ``tests/assets/tokenizer`` and ``tests/assets/c4_test`` under ``directory``."""
    assets = Path(directory) / "tests" / "assets"
    tokenizer = assets / "tokenizer"
    tokenizer.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZER / name, tokenizer / name)
    data = assets / "c4_test"
    data.mkdir(parents=True, exist_ok=True)
    (data / "data.txt").write_text("\n".join(dataset_lines()) + "\n")
    return Path(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    print(prepare(parser.parse_args().directory))


if __name__ == "__main__":
    main()
