"""The ``torchneuron`` command line: ``info``, ``pilot`` and ``coverage``."""
