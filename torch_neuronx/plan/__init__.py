"""``torchneuron plan``: size a training or serving job on Trainium without allocating it.

The model is built from its Transformers config on fake tensors; one rank's
step is traced for memory and kernels, and the projection package turns it
into step time, serving latency and cost. See ``docs/plan.md``.
"""
from .model_config import bundled_names, load_config
from .planner import Plan, Planner
from .request import Job, Layout
from .sharding import per_rank_parameters

__all__ = ["Job", "Layout", "Plan", "Planner", "bundled_names", "load_config", "per_rank_parameters"]
