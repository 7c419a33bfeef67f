"""The pilot's steps, one module each: ``run`` → a typed result, ``summary(result)``, ``html(data)``.

Every module names its ``TITLE`` and its result dataclass (whose ``to_data()``
is the step's ``data`` in report.json); ``status(result)`` where a step can be
``skipped`` or ``not_available`` instead of passed/failed by its checks. The
procedure (``..procedure``) decides the order; :data:`STEPS` is the report's order.
"""
from __future__ import annotations

from . import checkpoint, compilation, cost, finetune, inputs, numerics, performance, quality

STEPS = {"inputs": inputs, "numerics": numerics, "quality": quality, "finetune": finetune,
         "checkpoint": checkpoint, "compilation": compilation, "performance": performance, "cost": cost}
