# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs the package when missing; a stamp keyed on
# pyproject.toml makes the second run a no-op.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.compclip-installed

.PHONY: demo test install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/compclip demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n 2 -q

clean:
	rm -rf $(VENV) build src/*.egg-info runs
