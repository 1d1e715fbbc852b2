# memd — the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck imports units pytest bench torture torture-ci clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/memd run

test: $(STAMP) lint typecheck imports units pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy memd

imports: $(STAMP)
	$(BIN)/lint-imports

units:
	./systemd/verify

pytest: $(STAMP)
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python bench/run.py

torture: $(STAMP)
	$(BIN)/python torture/run.py

torture-ci: $(STAMP)
	$(BIN)/python torture/run.py --ci

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
