"""The emulated Neuron runtime: instance profiles, configuration and topology.

Nothing here touches device memory; it decides how many logical NeuronCores
this process sees and how much HBM each has, the way the real runtime reads
the instance type and the ``NEURON_*`` environment variables.
"""
