# Fresh machine: `make run` sets up and starts SpecChat on the embedded default model;
# `make test` sets up and runs the tests. Both only need python3 (>= 3.10) with venv, and PyPI.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/specchat $(ARGS)

test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(BIN)/python bench/engine_benchmark.py $(ARGS)

clean:
	rm -rf $(VENV) .cache
