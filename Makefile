# Set-up commands for a fresh machine (see README, "Set-up"):
#   make demo       - the main job: the migration pilot on the built-in default model
#   make test       - the test suite but its cold compiles of whole models (CI runs both: .ci/run)
#   make test-compiled-models - whole Hugging Face models compiled cold end to end (~3 min)
#   make test-fast  - the edit-test loop: one or a few files per package (tests/README.md)
#   make test-titan - TorchTitan on neuron against CPU, minutes; not in make test (docs/torchtitan.md)
#   make test-plan-sweep - every curated architecture planned end to end (~6 min; not in make test)
#   make test-exhaustive - every test make test leaves out (the three above and the torchrun examples)
# All create the virtual environment (.venv) on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The environment: written once, redone only when the dependency lists or the build script change.
STAMP := $(VENV)/.installed
TORCHTITAN := torchtitan==0.3.0
TITAN_STAMP := $(VENV)/.titan-installed
# The C++ core: an edit under csrc/ recompiles the units that include it, not the environment.
EXT_STAMP := $(VENV)/.extension-built
CSRC := $(shell find torch_neuronx/csrc -name '*.cpp' -o -name '*.h')

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
# cpp_extension looks for `ninja` on PATH; without it the build is serial.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: venv bytecode demo test test-compiled-models test-fast test-titan test-plan-sweep test-exhaustive bench clean

# Two resolver passes, each over a different set: the build requirements, then the package.
# `--no-build-isolation` builds against the torch installed here (an isolated build would
# fetch torch again), so torch must be in place before pip builds the package.
$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0 "setuptools>=77" wheel ninja numpy
	$(PY) -m pip install --quiet --no-build-isolation -e ".[hf,test,stablehlo]"
	touch $(STAMP)

# TorchTitan and the titan extra, only for make test-titan (make test leaves its jobs out: a
# 286 MB triton wheel CI would never use). TorchTitan goes in without its own requirements: the
# titan extra in pyproject.toml says why.
$(TITAN_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --no-build-isolation -e ".[hf,test,stablehlo,titan]"
	$(PY) -m pip install --quiet --no-deps $(TORCHTITAN)
	touch $(TITAN_STAMP)

$(EXT_STAMP): $(STAMP) $(CSRC)
	$(PY) setup.py --quiet build_ext --inplace
	touch $(EXT_STAMP)

venv: $(EXT_STAMP)

# Bytecode of the project's own Python, brought up to date before each run: pip compiles what it
# installs, but not an editable package, and with PYTHONDONTWRITEBYTECODE set (as on CI machines)
# every fresh interpreter a run starts would compile the modules it imports again (about 0.2 s of
# CPU each, over a hundred interpreters a test run). Only changed files are compiled again.
bytecode: $(EXT_STAMP)
	$(PY) -m compileall -q -j 0 torch_neuronx benchmarks tools tests examples torchneuron_launcher.py

demo: bytecode
	$(VENV)/bin/torchneuron info
	$(VENV)/bin/torchneuron pilot --out pilot-report

# XDIST=1: the same suite on pytest-xdist's workers (-n auto --dist loadfile) instead of pytest's
# process plus the background lane (tests/README.md compares the two).
test: bytecode
	$(PY) -m pytest -q -m "not exhaustive and not compiled_models" $(if $(XDIST),-n auto --dist loadfile) tests

# Whole Hugging Face models compiled cold (the HF compile tests, the compiled profiler step, the
# compiled coverage columns, the benchmarks' cold and warm compiled rounds): a minute or more each,
# so make test leaves them here.
test-compiled-models: bytecode
	$(PY) -m pytest -q -m compiled_models tests

# TorchTitan on neuron against CPU (docs/torchtitan.md): every layout, compile, checkpoint, bad input.
test-titan: bytecode $(TITAN_STAMP)
	$(PY) -m pytest -q tests/titan

# Every curated architecture planned end to end at every layout (docs/plan.md).
test-plan-sweep: bytecode
	$(PY) -m pytest -q -m exhaustive tests/plan/test_plan_sweep.py

# Every test make test leaves out: the `exhaustive` ones (TorchTitan's jobs, with the titan extra;
# the plan sweep; the torchrun examples) and the whole models compiled cold.
test-exhaustive: bytecode $(TITAN_STAMP)
	$(PY) -m pytest -q -m "exhaustive or compiled_models" tests

# The edit-test loop: the modules marked `fast` (each package once, the C++ core's own tests, the
# docs and layering checks) without their minutes-long tests; under 3 minutes on 2 cores.
test-fast: bytecode
	$(PY) -m pytest -q -m "fast and not slow" tests

bench: bytecode
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info torch_neuronx/*.so pilot-report
	find . -name __pycache__ -prune -exec rm -rf {} +
