# All set-up happens here: `make demo` and `make test` work on a fresh clone.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed
# Two workers, one test file each at a time (module-scoped training runs stay shared).
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: install demo test lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch pinned first: a CPU wheel here; unpinned it would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/bsm plan --model llama-3.1-8b --instance-type ml.p6-b200.48xlarge
	$(BIN)/bsm run-local blackwell_sm/templates/demo-tiny.yaml --out demo-run --nproc 2 --fresh
	$(BIN)/bsm report demo-run --out demo-run/report.html

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows docs/examples/github-actions.yml

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) demo-run .pytest_cache .ruff_cache
