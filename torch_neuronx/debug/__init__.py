"""Debugging aids; ``torch_neuronx.debug.metrics`` is the counters-and-timers facade."""
