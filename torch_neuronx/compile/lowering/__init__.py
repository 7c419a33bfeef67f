"""ATen FX graphs and eager kernels lowered to StableHLO with torch-mlir, as on Trainium.

A graph is put in functional form (``functionalise``), decomposed (``decompositions``: every
decomposition of the project) and imported (``lower``); ``custom_calls`` says which ops stay
custom calls, ``errors`` what a failure names, ``preserved`` where the StableHLO is kept on request.
"""
