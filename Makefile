# gpudeck: `make up` starts the whole stack, `make test` runs every test. Both install what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The trainer's TensorFlow (gpudeck's extras): the CUDA build where nvidia-smi lists a GPU, else the CPU build.
TF_EXTRA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo tensorflow-gpu || echo tensorflow)
STAMP := $(VENV)/.installed-$(TF_EXTRA)
SERVICE_STAMP := $(VENV)/.service-$(TF_EXTRA)
ARGS ?=
PYTEST_ARGS ?=
# WHEELHOUSE=DIR: install from a folder of wheels (`make wheelhouse`, `gpudeck bundle`) with no package index.
WHEELHOUSE ?=
OFFLINE = $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE))
# `make wheelhouse`'s target box (default: this one): e.g. PYTHON_VERSION=3.12 PLATFORM=manylinux_2_28_x86_64.
PYTHON_VERSION ?=
PLATFORM ?=

.PHONY: install install-service up test test-other test-slurm test-install check bench bench-gpu lint format clean \
	wheelhouse

# `make install` (what `make test` needs): the service with every feature, the zoo's TensorFlow and the test tools.
install: $(STAMP)

# uv installs (downloads in parallel): ~10 s from a fresh clone where pip takes ~95 s. If uv cannot be had or fails,
# pip installs the same. Bytecode: not uv's --compile-bytecode, which compiled all ~17,000 modules of the environment
# (25 s of a fresh clone's 34 s on 2 cores: TensorFlow's, sympy's, moto's, mlflow's whole trees), but every module
# of gpudeck imported once, in two processes (the trainer's, with TensorFlow; the rest, with TensorBoard's server,
# Optuna, pytest and its plugins): what its processes load (~4,500 modules, ~10 s), so that the first processes of
# `make up` or `make test` do not each compile the same modules at once.
PIP_INSTALL = $(BIN)/python -m pip install -q --disable-pip-version-check
UV_INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python
define PRECOMPILE_PY
import importlib, pkgutil, sys
for name in sys.argv[1:]:
    package = importlib.import_module(name.removesuffix(".*"))
    if name.endswith(".*"):
        for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not found.name.endswith("__main__"):
                importlib.import_module(found.name)
endef
export PRECOMPILE_PY
PRECOMPILE = env -u PYTHONDONTWRITEBYTECODE TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -c "$$PRECOMPILE_PY"
PRECOMPILE_REST = 'api.*' 'jobs.*' 'tui.*' optuna tensorboard.main pytest xdist pytest_timeout pytest_textual_snapshot
# bubblewrap (Debian's package) makes each job's sandbox (jobs/run/sandbox.py): installed here as root where it is
# missing; without it jobs run unsandboxed and named users may not run commands (the README's security section).
BWRAP_INSTALL = command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null 2>&1; }; }; } || \
	  echo "gpudeck: bubblewrap (bwrap) is not installed and could not be: jobs will run without a sandbox"
$(STAMP): pyproject.toml
	@$(BWRAP_INSTALL)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(PIP_INSTALL) $(OFFLINE) uv >/dev/null 2>&1 || true
	$(UV_INSTALL) $(OFFLINE) -e '.[$(TF_EXTRA),test]' --config-settings editable_mode=compat \
	  || $(PIP_INSTALL) $(OFFLINE) -e '.[$(TF_EXTRA),test]' --config-settings editable_mode=compat
	@{ $(PRECOMPILE) 'models.*' & trainer=$$!; $(PRECOMPILE) $(PRECOMPILE_REST); rest=$$?; \
	   wait $$trainer && [ $$rest = 0 ]; } >/dev/null 2>&1 \
	  || echo "gpudeck: compiling the bytecode of what gpudeck imports failed: its processes will compile it as they go"
	@rm -f $(VENV)/.installed-*
	@touch $@

# `make up`: what the service needs (gpudeck[service], the zoo's TensorFlow), none of the test tools; a venv that
# `make test` installed already serves as it is.
install-service: $(SERVICE_STAMP)

$(SERVICE_STAMP): pyproject.toml
	@$(BWRAP_INSTALL)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
	  { test -x $(BIN)/uv || $(PIP_INSTALL) $(OFFLINE) uv >/dev/null 2>&1 || true; } && \
	  { $(UV_INSTALL) $(OFFLINE) -e '.[$(TF_EXTRA),service]' --config-settings editable_mode=compat \
	    || $(PIP_INSTALL) $(OFFLINE) -e '.[$(TF_EXTRA),service]' --config-settings editable_mode=compat; }; fi
	@rm -f $(VENV)/.service-*
	@touch $@

up: install-service
	$(BIN)/gpudeck up $(ARGS)

# A folder of every wheel `make install WHEELHOUSE=wheelhouse` (or `pip install --no-index --find-links wheelhouse
# 'gpudeck[…]'`) needs on a box with no package index, downloaded here for PYTHON_VERSION and PLATFORM (README:
# "Offline").
wheelhouse: install-service
	$(BIN)/gpudeck bundle wheelhouse --extras $(TF_EXTRA),service \
	  $(if $(PYTHON_VERSION),--python-version $(PYTHON_VERSION)) $(if $(PLATFORM),--platform $(PLATFORM))

# Tests run in parallel (pytest-xdist): two processes a core and one more, at most 8 (end-to-end tests spend seconds
# waiting on heartbeats, timeouts and idle TensorBoards; the extra processes use that core time: on 2 cores, 5 took
# 8m10s where 3 took 9m20s, and 6 was slower again). Tests that share a module fixture are one xdist_group.
# PYTEST_ARGS="-n 0" runs them one at a time.
TEST_PROCS ?= $(shell $(PYTHON) -c "import os; print(min(8, 2 * (os.cpu_count() or 1) + 1))")
# The suite starts hundreds of Python processes of the same code (test processes, APIs, workers, trainers, the CLI):
# Python's bytecode cache is kept for them even where the environment sets PYTHONDONTWRITEBYTECODE (as this
# machine's does: each process compiled gpudeck again and each test process rewrote every test module's asserts,
# ~5 CPU-s per test process). __pycache__ is ignored by git.
# The suite keeps both cores busy throughout (five test processes, many trainers at once): a trainer's TensorFlow
# computes each op on one thread (TF_NUM_INTRAOP_THREADS=1; it reaches jobs as every TF_ variable does) instead of
# two threads contending with the other processes for the same two cores (~7 % less CPU for four trainers at once),
# and runs independent ops one at a time (TF_NUM_INTEROP_THREADS=1: ~5 % less CPU for a ResNet-20 of 30 steps;
# the multi-worker jobs' collective all-reduce still completes, tests/jobs/test_multiworker_e2e.py).
PYTEST = env -u PYTHONDONTWRITEBYTECODE TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 $(BIN)/python -m pytest
test: install
	$(PYTEST) -n $(TEST_PROCS) --dist loadgroup $(PYTEST_ARGS)

# The suite as another machine of this kind would run it: TensorFlow without oneDNN's custom operations (other float
# paths, other start-up lines), oneDNN held to AVX2 instructions, and the whole suite on OTHER_CPUS (one core). A test
# whose verdict changes here depends on the machine. Run it before you stop (it takes about twice `make test`).
OTHER_MACHINE ?= TF_ENABLE_ONEDNN_OPTS=0 ONEDNN_MAX_CPU_ISA=AVX2
OTHER_CPUS ?= 0
test-other: install
	env $(OTHER_MACHINE) taskset -c $(OTHER_CPUS) $(PYTEST) -n 2 --dist loadgroup $(PYTEST_ARGS)

# Slurm (issue 45): gpudeck up --backend slurm and Slurm's dialect against a real one-node Slurm (tests/slurm/, not
# in `make test`; .ci/run runs both). The fixture installs Debian's slurm-wlm and munge where it may (root and apt-get,
# as bubblewrap is) and starts munged, slurmctld and slurmd in a temporary folder; where it cannot, the tests skip
# saying why. About 4 minutes.
test-slurm: install
	$(PYTEST) tests/slurm $(PYTEST_ARGS)

# Installed as a lab installs it (issue 68, tests/install/, not in `make test`; .ci/run runs it): a wheelhouse made
# offline installed into a fresh venv with no index, the service run from there without TensorFlow, and the wheel
# with [tensorflow] training a lenet. About two minutes.
test-install: install
	$(PYTEST) tests/install -s $(PYTEST_ARGS)

# The quick loop: lint and types, then every test that starts no stack and trains nothing.
check: lint
	$(PYTEST) -n auto --maxprocesses 4 --dist loadgroup -m "not slow" $(PYTEST_ARGS)

bench: install
	$(UV_INSTALL) -e '.[$(TF_EXTRA),test,bench]' --config-settings editable_mode=compat \
	  || $(PIP_INSTALL) -e '.[$(TF_EXTRA),test,bench]' --config-settings editable_mode=compat
	$(BIN)/python -m pytest tests/bench -s --durations=0 $(PYTEST_ARGS)

# The GPU benchmark, for the first real GPU box: ResNet-56 images/s per GPU with mixed precision and XLA, one job per
# GPU at once (pinned, no cross-talk), then the doctor (tests/bench/test_gpu_bench.py; it says so and skips where
# nvidia-smi lists no GPU).
bench-gpu: install
	$(BIN)/python -m pytest tests/bench/test_gpu_bench.py tests/bench/test_gpu_torch.py -s $(PYTEST_ARGS)

# mypy type-checks api/, jobs/ and models/ (pyproject.toml's [tool.mypy]); the job spec's pydantic models are typed.
lint: install
	$(BIN)/ruff check api jobs models tui tests
	$(BIN)/ruff format --check api jobs models tui tests
	$(BIN)/mypy

format: install
	$(BIN)/ruff format api jobs models tui tests
	$(BIN)/ruff check --fix api jobs models tui tests

clean:
	rm -rf $(VENV) .pytest_cache
