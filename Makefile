# posenc — `make train` and `make test` do all setup on a fresh machine (they create .venv).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# torch goes in first, pinned: an unpinned torch would pull a multi-GB CUDA build on CPU machines.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
STAMP := $(VENV)/.installed
CONFIG ?= configs/dna_lm.yaml
MLFLOW_DB ?= mlflow.db
UI_HOST ?= 127.0.0.1
UI_PORT ?= 5000
# The machines here set PYTHONDONTWRITEBYTECODE=1 and pip runs with --no-compile: unset it for our
# commands so .pyc files get written once, lazily, instead of every process recompiling torch/lightning.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(BIN)/pip install --no-compile --disable-pip-version-check

.DEFAULT_GOAL := help
.PHONY: help install train test test-all lint ui clean evaluate compare bench

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  variables: CONFIG=$(CONFIG) TORCH_SPEC=$(TORCH_SPEC) TORCH_INDEX_URL=$(TORCH_INDEX_URL)"

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) "$(TORCH_SPEC)"
	$(PIP_INSTALL) -c requirements.lock -e ".[dev]"
	touch $@

install: $(STAMP) ## Create .venv and install torch, then the project (skipped when up to date)

train: $(STAMP) ## Train CONFIG (default: DNA LM on E. coli), test at 1-8x length, log to MLflow
	$(PY) -m pipelines.train fit --config $(CONFIG) $(ARGS)

evaluate: $(STAMP) ## Score CKPT (checkpoint or MLflow run id) at 1-16x its training length [CONFIG=...]
	@test -n "$(CKPT)" || { echo "error: set CKPT=<checkpoint path or MLflow run id>" >&2; exit 2; }
	$(PY) -m pipelines.eval.evaluate $(CKPT) $(if $(filter command line environment,$(origin CONFIG)),--config $(CONFIG)) $(ARGS)

compare: $(STAMP) ## Train CONFIG once per scheme in SCHEMES="..." [SEEDS="0 1"], compare at every length
	@test -n "$(SCHEMES)" || { echo "error: set SCHEMES=\"none rope alibi ...\" (names in configs/posenc/)" >&2; exit 2; }
	$(PY) -m pipelines.eval.compare --config $(CONFIG) --schemes $(SCHEMES) $(if $(SEEDS),--seeds $(SEEDS)) $(ARGS)

test: $(STAMP) ## Run the fast test suite (what CI runs)
	$(PY) -m pytest -q $(ARGS)

test-all: $(STAMP) ## Run every test, slow ones included
	$(PY) -m pytest -q -m "slow or not slow" $(ARGS)

lint: $(STAMP) ## ruff check
	$(BIN)/ruff check .

ui: $(STAMP) ## Serve the MLflow UI on $(UI_HOST):$(UI_PORT) (loopback unless UI_HOST is set)
	@$(PY) -m pipelines.tracking.ui_url --db $(MLFLOW_DB) --host $(UI_HOST) --port $(UI_PORT)
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow server \
	  --backend-store-uri sqlite:///$(MLFLOW_DB) --host $(UI_HOST) --port $(UI_PORT) --workers 1

clean: ## Remove outputs, the MLflow store and caches (keeps .venv)
	rm -rf outputs mlruns mlartifacts $(MLFLOW_DB) .pytest_cache .ruff_cache

.PHONY: experiments
experiments: $(STAMP) ## Run the literature's claims with their controls (configs/experiments/) [ONLY=name] [ARGS=--smoke]
	$(PY) -m pipelines.eval.claims $(if $(ONLY),--only $(ONLY)) $(ARGS)

.PHONY: predict
predict: $(STAMP) ## Run CKPT (checkpoint, MLflow run id or models:/ URI) on INPUT, write OUTPUT
	@test -n "$(CKPT)" -a -n "$(INPUT)" -a -n "$(OUTPUT)" || \
	  { echo "usage: make predict CKPT=<ckpt|run id|models:/name/version> INPUT=<file> OUTPUT=<file> [ARGS=...]" >&2; exit 2; }
	$(PY) -m pipelines.inference.predict --ckpt "$(CKPT)" --input "$(INPUT)" --output "$(OUTPUT)" $(ARGS)

bench: $(STAMP) ## Throughput/memory vs x-transformers and hand SDPA -> bench_results.md (ARGS=--quick)
	@$(PY) -c "import x_transformers" 2>/dev/null || $(PIP_INSTALL) -c requirements.lock -e ".[bench]"
	$(PY) -m pipelines.bench $(ARGS)
