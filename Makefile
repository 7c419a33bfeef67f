# Two set-up commands for a fresh machine (see README):
#   make demo   - the main job: the migration pilot on the built-in default model
#   make test   - the test suite
# Both create the virtual environment (.venv) on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1

.PHONY: venv demo test test-fast bench clean

$(STAMP): pyproject.toml setup.py $(shell find torch_neuronx/csrc -name '*.cpp' -o -name '*.h')
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet "setuptools>=77" wheel ninja numpy
	$(PY) -m pip install --quiet --no-build-isolation -e ".[hf,test,stablehlo]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/torchneuron info
	$(VENV)/bin/torchneuron pilot --out pilot-report

test: $(STAMP)
	$(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info torch_neuronx/*.so pilot-report
