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
	$(BIN)/ruff check reach policies actors tests bench examples cluster
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: lint
	$(BIN)/pytest
	$(BIN)/pytest tests/cluster

bench: $(STAMP)
	$(BIN)/reach bench

clean:
	rm -rf $(VENV) build *.egg-info
