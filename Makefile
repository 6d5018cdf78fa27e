# Every target sets up .venv itself, so a fresh clone needs only python3 and the package registries.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint typecheck clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/jha run --config config/demo.yaml --once

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy agent drivers
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy agent drivers

clean:
	rm -rf $(VENV) var build *.egg-info
