# The two commands: `make run` (set up + the main job) and `make test` (set up + the tests).
# Set-up is pip only, into .venv, and re-runs only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/tilecraft example

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/vermin --target=3.10- --violations --no-tips --eval-annotations \
	    src/tilecraft/hw/config.py src/tilecraft/hw/isa src/tilecraft/hw/regs.py \
	    src/tilecraft/runtime src/tilecraft/boards src/tilecraft/errors.py

test: lint
	$(BIN)/python -m pytest -q
