# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs the exact versions of requirements.lock when missing; a stamp
# keyed on the lock file and pyproject.toml makes the second run a no-op. `make lock` regenerates
# the lock on purpose (newest releases within pyproject.toml's ranges and the pins below).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.compclip-installed
# The lock is resolved for CPython 3.11 on x86-64 Linux, the machines CI and developers use.
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-manylinux_2_28
# torch and torchvision are pinned to the newest pair every machine here keeps on disk: pip installs
# them from there in seconds, where a newer release is a 3 GB download on every fresh machine.
LOCK_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: demo test lint install lock test-compat test-lowest test-released clean chromium

install: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/compclip demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks research

# The oldest transformers an export promises to load in (docs/guide.md), older than compclip's own: a folder put first on
# the path of the test that loads both exports with it (tests/test_export.py), the rest of .venv beneath it.
TF_FLOOR := $(VENV)/transformers-4.40
$(TF_FLOOR)/.done: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target $(TF_FLOOR) transformers==4.40.2 tokenizers==0.19.1 \
		huggingface_hub==0.36.2
	@touch $@

# CLIP_benchmark, whose `build` must read compclip's result folders (tests/test_eval.py), with what its command line
# imports and .venv lacks: a folder put first on that test's path. Pinned, as the lock pins the rest.
BENCH := $(VENV)/clip-benchmark
$(BENCH)/.done: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target $(BENCH) clip-benchmark==1.6.2 scikit-learn==1.9.1 \
		scipy==1.17.1 joblib==1.6.0 threadpoolctl==3.8.0 cloudpickle==3.1.3 narwhals==2.29.0 pycocoevalcap==1.2 pycocotools==2.0.11
	@touch $@

# Debian's chromium, in which the error gallery's test opens the page (tests/test_gallery.py): installed where missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		$(SUDO) apt-get install -y --no-install-recommends chromium >/dev/null || \
		{ $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y --no-install-recommends chromium >/dev/null; }

# Two workers on two cores, one thread each: torch's threads in both workers (and in the processes they start) would
# otherwise ask for twice the cores there are. Work stealing: a worker left idle takes tests queued on the other, so the
# minute-long end-to-end tests do not end the run on one worker alone. The 25 slowest tests are named at the end.
test: lint chromium $(TF_FLOOR)/.done $(BENCH)/.done
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 COMPCLIP_TRANSFORMERS_FLOOR_PATH=$(TF_FLOOR) COMPCLIP_BENCH_PATH=$(BENCH) $(PY) -m pytest -n 2 --dist worksteal -q --durations=25

# The released checkpoints' ViT-L entries that `make test` leaves out (tests/test_released.py, marked slow): each loads
# a real-size stand-in by its id and scores (CLIPA's, CLIPS's, SigLIP-L's, the second CLIC ViT-L's); 75 to 85 s.
test-released: $(STAMP)
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -m slow tests/test_released.py

lock: $(STAMP)
	printf '%s\n' $(LOCK_PINS) > $(VENV)/lock-pins.txt
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --extra hf --extra wandb --upgrade --constraint $(VENV)/lock-pins.txt \
		$(LOCK_TARGET) --custom-compile-command "make lock" --output-file requirements.lock

# The suite on torch's floor (pyproject.toml), in its own venv (uv downloads that torch's CUDA build): what a GPU image
# with its own, older torch runs compclip on.
COMPAT ?= .venv-compat
COMPAT_PINS := torch==2.8.0 torchvision==0.23.0
test-compat: chromium $(STAMP) $(TF_FLOOR)/.done $(BENCH)/.done
	@test -x $(COMPAT)/bin/python || $(PYTHON) -m venv $(COMPAT)
	printf '%s\n' $(COMPAT_PINS) > $(COMPAT)/pins.txt
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --extra hf --extra wandb --constraint $(COMPAT)/pins.txt $(LOCK_TARGET) \
		--quiet --output-file $(COMPAT)/requirements.lock
	$(VENV)/bin/uv pip sync --python $(COMPAT)/bin/python $(COMPAT)/requirements.lock
	$(VENV)/bin/uv pip install --python $(COMPAT)/bin/python --no-deps -e .
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 COMPCLIP_TRANSFORMERS_FLOOR_PATH=$(TF_FLOOR) COMPCLIP_BENCH_PATH=$(BENCH) \
		$(COMPAT)/bin/python -m pytest -n 2 -q -p no:cacheprovider

# The suite on the oldest release of each dependency pyproject.toml admits (uv's lowest-direct resolution), in its own
# venv, with torch and torchvision held at the lock's pair (the previous torch is test-compat's; pip takes them from this
# machine's disk). A floor the suite fails on is raised in pyproject.toml: docs/benchmarks.md has the last run. The export
# test's transformers 4.40 is named as in `make test`; CLIP_benchmark's folder is not (built for the lock's numpy).
LOWEST ?= .venv-lowest
test-lowest: $(STAMP) $(TF_FLOOR)/.done
	@test -x $(LOWEST)/bin/python || $(PYTHON) -m venv $(LOWEST)
	printf '%s\n' $(LOCK_PINS) > $(LOWEST)/pins.txt
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --extra hf --extra wandb --resolution lowest-direct --constraint $(LOWEST)/pins.txt \
		$(LOCK_TARGET) --quiet --output-file $(LOWEST)/requirements.lock
	$(LOWEST)/bin/python -m pip install --quiet --disable-pip-version-check -r $(LOWEST)/requirements.lock
	$(LOWEST)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(LOWEST)/bin/python -m pip check
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 COMPCLIP_TRANSFORMERS_FLOOR_PATH=$(TF_FLOOR) $(LOWEST)/bin/python -m pytest -n 2 -q -p no:cacheprovider

clean:
	rm -rf $(VENV) $(COMPAT) $(LOWEST) build src/*.egg-info runs
