# Two commands for a fresh machine with Python 3.11: `make demo` and `make test`.
# Each creates the virtual environment (.venv) on first use and refreshes it when pyproject.toml changes.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/reach demo

lint: $(STAMP)
	$(BIN)/ruff check reach policies actors tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/seed_scenario.py
	$(BIN)/python bench/registry_scale.py
	$(BIN)/python bench/chaos.py
	$(BIN)/python bench/sessions.py

clean:
	rm -rf $(VENV) build *.egg-info
