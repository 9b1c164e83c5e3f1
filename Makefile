# msgcask: the two commands a fresh clone needs are `make demo` and `make test`.
# Each one sets everything up first (scripts/bootstrap.sh; instant when already done).

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
# Lint only the trees that exist: tests/ and bench/ may not be there yet.
CODE := $(wildcard src tests bench)
# Extra arguments, e.g. `make test PYTEST_ARGS="--big -x"`, `make demo DEMO_ARGS=--help`.
PYTEST_ARGS ?=
DEMO_ARGS ?=
BENCH_ARGS ?=

.PHONY: help bootstrap demo test lint format-check typecheck pytest bench format clean

# Without tests/, pytest would search the whole checkout; say what is wrong instead.
need_tests = @test -d tests || { echo "make: no tests/ directory: nothing for pytest to run" >&2; exit 1; }

help:
	@echo "make demo     set up, then run the dead-letter-heavy demo (msgcask demo)"
	@echo "make test     set up, then ruff check, ruff format --check, mypy, pytest"
	@echo "make bench    set up, then run the micro-benchmarks (pytest bench/ --benchmark-only)"
	@echo "make format   apply ruff's fixes and formatting"
	@echo "make clean    remove .venv and caches"

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	$(BIN)/msgcask demo $(DEMO_ARGS)

# One recipe, so the steps run in this order even under `make -j`.
test: bootstrap
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check $(CODE)
	$(BIN)/mypy src
	$(need_tests)
	$(BIN)/pytest $(PYTEST_ARGS)

lint: bootstrap
	$(BIN)/ruff check $(CODE)

format-check: bootstrap
	$(BIN)/ruff format --check $(CODE)

typecheck: bootstrap
	$(BIN)/mypy src

pytest: bootstrap
	$(need_tests)
	$(BIN)/pytest $(PYTEST_ARGS)

bench: bootstrap
	$(BIN)/pytest bench/ --benchmark-only $(BENCH_ARGS)

format: bootstrap
	$(BIN)/ruff check --fix $(CODE)
	$(BIN)/ruff format $(CODE)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks \
		build dist src/*.egg-info
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
