# fairseq-syntax: `make demo` (Multi30k En->De PASCAL, end to end) and `make test` (lint, then the test suite).
# Both create .venv in the repository root when it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA_ROOT ?= $(abspath ../shared/data)
DEMO_DIR ?= work/demo
DEMO_UPDATES ?= 500

.PHONY: demo test test-slow test-full lint install bench clean-demo parsers

install: $(VENV)/.installed

# Three steps (see requirements/): the build deps, fairseq-fixed compiled against them
# (it has no wheel and its declared deps pull an unusable torchaudio), then the rest and this package.
$(VENV)/.installed: setup.py requirements/build.txt requirements/runtime.txt requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/build.txt
	$(PY) -c "import fairseq" 2>/dev/null || MAX_JOBS=2 $(PY) -m pip install -q --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/runtime.txt
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

PYTEST = DATA_ROOT=$(DATA_ROOT) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadgroup --durations=15

# the suite but the tests marked slow (pytest.ini); test-slow: those; test-full: all
test: install lint
	$(PYTEST) -m "not slow" tests

test-slow: install
	$(PYTEST) -m slow tests

test-full: install lint
	$(PYTEST) tests

# ruff (ruff.toml) and the layering contracts (.importlinter): a change that breaks either fails `make test`
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

demo: install
	DATA_ROOT=$(DATA_ROOT) DEMO_UPDATES=$(DEMO_UPDATES) bash examples/multi30k/demo.sh $(DEMO_DIR)

bench: install parsers/en_ewt.supar
	DATA_ROOT=$(DATA_ROOT) $(PY) bench/bench.py --workdir work/bench

clean-demo:
	rm -rf $(DEMO_DIR)

# SuPar parsers with UD labels (offline, from ../shared/data/ud), used as --source-parser supar:PATH
UD := $(DATA_ROOT)/ud
parsers: parsers/en_ewt.supar parsers/de_gsd_pud.supar

# made once (delete the file to retrain); the benchmark's LDD systems need the English one
parsers/en_ewt.supar: | $(VENV)/.installed
	mkdir -p parsers
	$(PY) -m fairseq_syntax_preprocess.train_parser --train $(UD)/UD_English-EWT/en_ewt-ud-train.conllu.gz \
	  --dev $(UD)/UD_English-EWT/en_ewt-ud-dev.conllu.gz --test $(UD)/UD_English-EWT/en_ewt-ud-test.conllu.gz \
	  --output parsers/en_ewt.supar --config small --epochs 8

parsers/de_gsd_pud.supar: | $(VENV)/.installed
	mkdir -p parsers
	$(PY) -m fairseq_syntax_preprocess.train_parser --train $(UD)/UD_German-GSD/de_gsd-ud-dev.conllu.gz \
	  --train $(UD)/UD_German-PUD/de_pud-ud-test.conllu.gz \
	  --dev $(UD)/UD_German-GSD/de_gsd-ud-test.conllu.gz --output parsers/de_gsd_pud.supar --config small --epochs 20
