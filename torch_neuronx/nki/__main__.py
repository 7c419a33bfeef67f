"""``python -m torch_neuronx.nki script.py [args]``: run a script whose first line is ``import nki``."""
from __future__ import annotations

import runpy
import sys

from .finder import install


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m torch_neuronx.nki script.py [args...]")
    install()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


main()
