# memd — the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck imports units pytest watchdog-floor bench torture torture-ci eval mutate clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/memd run

test: $(STAMP) lint typecheck imports units pytest watchdog-floor

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

# memd.watcher is built on watchdog's internal InotifyFD API: its tests run again against the oldest watchdog that
# pyproject.toml allows (the venv holds the newest), installed beside the venv and put first on the path.
WATCHDOG_FLOOR := $(shell sed -n 's/.*"watchdog>=\([0-9.]*\),.*/\1/p' pyproject.toml)
watchdog-floor: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps --upgrade --target $(VENV)/watchdog-floor "watchdog==$(WATCHDOG_FLOOR)"
	PYTHONPATH=$(VENV)/watchdog-floor $(BIN)/python -c "import watchdog.version as v; assert v.VERSION_STRING == '$(WATCHDOG_FLOOR)', v.VERSION_STRING"
	PYTHONPATH=$(VENV)/watchdog-floor $(BIN)/pytest -q tests/unit/test_watcher.py tests/integration/test_watching.py

bench: $(STAMP)
	$(BIN)/python bench/run.py

torture: $(STAMP)
	$(BIN)/python torture/run.py

torture-ci: $(STAMP)
	$(BIN)/python torture/run.py --ci

# Mutation testing (mutmut) of the modules where a silent bug loses data or lets someone in, in a scratch copy
# (MUTATE_DIR, default /tmp/memd-mutate); slow, not part of `make test` or CI. docs/testing.md has the report.
# MUTATE_MODULES="memd.fsio memd.protocol" for some modules only.
mutate: $(STAMP)
	$(BIN)/python tests/mutation.py $(MUTATE_MODULES)

# Fact recall across checkpoints (eval/README.md); writes docs/memory-quality.md. Not part of `make test`.
# EVAL_ARGS="--quick" for a short run, "--rev HEAD" to measure the committed memd/.
eval: $(STAMP)
	$(BIN)/python eval/run.py $(EVAL_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
