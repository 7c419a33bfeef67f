"""``torchneuron plan``: size a training or inference job on Trainium without allocating it.

The model is built from its Transformers config on fake tensors; one rank's
step is traced for memory and kernels, and the projection package turns it
into step time and cost. See ``docs/plan.md``.
"""
from .model_config import bundled_names, load_config
from .planner import Layout, Planner
from .sharding import per_rank_parameters

__all__ = ["Layout", "Planner", "bundled_names", "load_config", "per_rank_parameters"]
