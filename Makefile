# Two entry points for a fresh clone: `make quickstart` and `make test`.
# Both create .venv with python3 -m venv when it is missing and install the project into it.
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: quickstart test lint format clean

$(STAMP): pyproject.toml
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

quickstart: $(STAMP)
	$(PYTHON) -m seq2seq.quickstart --workdir runs/quickstart

test: $(STAMP)
	$(PYTHON) -m pytest

lint: $(STAMP)
	$(PYTHON) -m ruff check . && $(PYTHON) -m ruff format --check .

format: $(STAMP)
	$(PYTHON) -m ruff format . && $(PYTHON) -m ruff check --fix .

clean:
	rm -rf runs .pytest_cache .jax_cache
