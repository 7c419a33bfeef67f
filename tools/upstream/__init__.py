"""The Hugging Face libraries' own test suites, run on ``cpu`` and on ``neuron`` side by side.

``python -m tools.upstream`` obtains the upstream test files at (or
nearest to) the installed versions (:mod:`.sources`), applies the listed shims
(:mod:`.shims`), runs each chosen file once per device in a child process
(:mod:`.run`, :mod:`.child`) and writes the side-by-side table (:mod:`.table`)
as markdown and JSON. It is a tool, not part of ``tests/``: it runs other
projects' suites in separate processes and reports the difference, and it
needs downloads and tens of minutes, which ``pytest tests`` must not. Nothing
downloaded is kept in the repository.
"""
