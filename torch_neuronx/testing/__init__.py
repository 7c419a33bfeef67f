"""Tools-layer helpers shared by the pilot, the coverage sweep, the tests, examples and benchmarks.

:mod:`.tiny_models` builds tiny Transformers models offline from config
classes; :mod:`.child_process` runs work in a child Python process over one
small JSON-lines protocol; :mod:`.transformers_device_spec` is the device spec
file for Transformers' own test suite.
Nothing in the core packages imports this package.
"""
