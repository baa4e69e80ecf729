# fairseq-syntax: `make demo` (Multi30k En->De PASCAL, end to end) and `make test` (the test suite).
# Both create .venv in the repository root when it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA_ROOT ?= $(abspath ../shared/data)
DEMO_DIR ?= work/demo
DEMO_TRAIN_MINUTES ?= 10

.PHONY: demo test install bench clean-demo

install: $(VENV)/.installed

# Three steps (see requirements/): the build deps, fairseq-fixed compiled against them
# (it has no wheel and its declared deps pull an unusable torchaudio), then the rest and this package.
$(VENV)/.installed: setup.py requirements/build.txt requirements/runtime.txt requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==23.2.1
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/build.txt
	$(PY) -c "import fairseq" 2>/dev/null || MAX_JOBS=2 $(PY) -m pip install -q --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/runtime.txt
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

test: install
	DATA_ROOT=$(DATA_ROOT) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --durations=15 tests

demo: install
	DATA_ROOT=$(DATA_ROOT) DEMO_TRAIN_MINUTES=$(DEMO_TRAIN_MINUTES) bash examples/multi30k/demo.sh $(DEMO_DIR)

bench: install
	DATA_ROOT=$(DATA_ROOT) $(PY) bench/bench_pascal.py --workdir work/bench

clean-demo:
	rm -rf $(DEMO_DIR)
