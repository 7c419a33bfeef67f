"""The pilot's steps, one module each (``README.md`` here describes the interface).

:data:`STEPS` is the report's order. The run's order is the three phases below, which the
procedure (``..procedure``) walks: a step named in :data:`BEFORE_MODES` or
:data:`AFTER_MODES` has ``run_once(ctx)``, one in :data:`EACH_MODE` has
``run_mode(ctx, mode)`` and a ``RESULT`` class; ``ctx`` is the run's
:class:`..context.PilotContext`.
"""
from __future__ import annotations

from . import checkpoint, compilation, cost, finetune, inputs, numerics, performance, quality

STEPS = {"inputs": inputs, "numerics": numerics, "quality": quality, "finetune": finetune,
         "checkpoint": checkpoint, "compilation": compilation, "performance": performance, "cost": cost}

# Loads the model and the known inputs every later step uses.
BEFORE_MODES = ("inputs",)
# In each mode block (the model compiled once per block), compilation first: the first call of a
# shape must be cold.
EACH_MODE = ("compilation", "numerics", "quality", "performance")
# Once, after the modes: the fine-tune changes the weights, so it comes after every step that
# reads them; cost prices the other steps' results, so it comes last.
AFTER_MODES = ("quality", "checkpoint", "finetune", "cost")
