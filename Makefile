# Fresh machine: `make run` sets up and starts SpecChat on the embedded default model;
# `make test` sets up and runs the tests. Both only need python3 (>= 3.10) with venv, and PyPI.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench head installer installer-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# SpecChat's CPU kernels (inference/kernels/) are compiled here, never at run time: without g++ it says so in one line
# and the app runs OpenVINO's kernels (tools/build_kernels.py).
$(VENV)/.installed: pyproject.toml inference/kernels/q4_matmul.cpp $(wildcard inference/kernels/*.hpp) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python tools/build_kernels.py
	touch $@

# The tests also convert tiny Hugging Face checkpoints, so they need the conversion extra.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test,convert]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/specchat $(ARGS)

# Two phases (the README's "Fresh machine: two commands"): the tests marked serial (wall-time bounds, GUI stall limits) run alone,
# after the others have run on two pytest-xdist workers, one a file, in the order tests/conftest.py gives (long files
# first: --no-loadscope-reorder, or xdist hands out the files with the most tests first); it fails if either phase fails.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest --phase parallel -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS); status=$$?; \
	$(BIN)/python -m pytest --phase serial $(PYTEST_ARGS) && exit $$status

bench: $(VENV)/.installed
	$(BIN)/python bench/engine_benchmark.py $(ARGS)

# Rebuilds the shipped draft head from the committed corpus (the stages its manifest records) into build/draft_head/head
# and checks its held-out acceptance against the shipped head's (tools/draft_head/rebuild.py; about 3.5 hours on 2 cores).
head: $(VENV)/.installed-test
	$(BIN)/python -m tools.draft_head.rebuild $(ARGS)

# Standalone installers (see the README's "Building installers"): dist/specchat/ and dist/specchat_<version>_amd64.deb,
# built in their own environment (build/packaging-venv) that never holds the conversion extra.
installer:
	bash packaging/build_linux.sh

# Builds the installers unless dist/ is newer than the sources, then smoke-tests the bundle and the .deb (root for dpkg).
installer-test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m installer tests/packaging $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .cache
