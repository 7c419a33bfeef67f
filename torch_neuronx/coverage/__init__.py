"""``torchneuron coverage``: every causal-LM architecture of the installed Transformers on the device.

:mod:`torch_neuronx.testing.tiny_models` shrinks each architecture's default config, :mod:`.probe` runs
the checks on CPU and on the device, :mod:`.probe_process` runs probes in a child
process and :mod:`.sweep` farms architectures out to such workers, restarting
one when a model crashes it. :mod:`.popular` is the curated list of widely
used architectures the second percentage is computed over.
"""
