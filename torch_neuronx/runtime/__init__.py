"""The emulated Neuron runtime: settings, instance profiles, topology, cache
directories, logging, errors and the metrics registry.

The lowest layer: it imports nothing else of the package. Nothing here touches
device memory; it decides how many logical NeuronCores this process sees and
how much HBM each has, the way the real runtime reads the instance type and
the ``NEURON_*`` environment variables. See ``README.md`` in this folder.
"""
