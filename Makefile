# `make run` and `make test` set up a fresh machine themselves (a venv in .venv).
# torch is pinned first: the CPU wheel here; a bare `torch` requirement could pull several GB of
# CUDA wheels. On a GPU node, install the torch you want into .venv before `make run`, or set TORCH.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
ARGS ?=

.PHONY: run test lint bench clean

$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[deepspeed,accelerate,optimizers,dev]"
	touch $@

run: $(BIN)/.installed
	$(BIN)/ds-doctor run $(ARGS)

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(BIN)/.installed
	$(BIN)/ruff check doctor probes reports tests bench

bench: $(BIN)/.installed
	$(BIN)/python bench/bench_env.py
	$(BIN)/python bench/bench_nightly.py

clean:
	rm -rf $(VENV) ds-doctor-reports
