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
# TRACKING_URI=http://<server>:5000 sends train/compare/evaluate/predict to a shared tracking server
# (it sets MLFLOW_TRACKING_URI, which they all read); unset, they use the sqlite store $(MLFLOW_DB).
ifdef TRACKING_URI
export MLFLOW_TRACKING_URI := $(TRACKING_URI)
endif
# The machines here set PYTHONDONTWRITEBYTECODE=1 and pip runs with --no-compile: unset it for our
# commands so .pyc files get written once, lazily, instead of every process recompiling torch/lightning.
unexport PYTHONDONTWRITEBYTECODE
# The working folder is never on the import path (Python >= 3.11; pipelines/__init__.py also drops it):
# a yaml.py or evil.py beside the data is never imported.
export PYTHONSAFEPATH := 1
# No network at run time: MLflow's usage telemetry off for every command (the UI server included).
export MLFLOW_DISABLE_TELEMETRY ?= true
PIP_INSTALL := $(BIN)/pip install --no-compile --disable-pip-version-check

.DEFAULT_GOAL := help
.PHONY: help install train test test-all smoke lint ui tracking-server clean evaluate compare bench figures posenc-wheel

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  variables: CONFIG=$(CONFIG) TORCH_SPEC=$(TORCH_SPEC) TORCH_INDEX_URL=$(TORCH_INDEX_URL)"

# pip's own output goes to $(VENV)/install.log (its last lines are shown if it fails).
INSTALL_LOG := $(VENV)/install.log
$(STAMP): pyproject.toml requirements.lock
	@echo "make: installing $(TORCH_SPEC), then posenc and its dependencies into $(VENV)" \
	  "(a minute or two; pip's log: $(INSTALL_LOG))"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP_INSTALL) $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) "$(TORCH_SPEC)" \
	  > $(INSTALL_LOG) 2>&1 || { tail -n 30 $(INSTALL_LOG); exit 1; }
	@$(PIP_INSTALL) -c requirements.lock -e ".[dev]" >> $(INSTALL_LOG) 2>&1 \
	  || { tail -n 30 $(INSTALL_LOG); exit 1; }
	@$(PY) -c "$(WARM_IMPORTS)" >> $(INSTALL_LOG) 2>&1 || { tail -n 30 $(INSTALL_LOG); exit 1; }
	@touch $@
# Bytecode for what the entry points import, written once here (~45 CPU s): otherwise make test's two
# workers both compile torch/Lightning/MLflow at once (~30 CPU s each), and so does the first make train.
WARM_IMPORTS := import pipelines.train, pipelines.studies.compare.run, pipelines.inference.predict, \
  mlflow.store.tracking.sqlalchemy_store, matplotlib.pyplot

install: $(STAMP) ## Create .venv and install torch, then the project (skipped when up to date)

train: $(STAMP) ## Train CONFIG (default: DNA LM on E. coli), test at 1-8x length, log to MLflow
	$(PY) -m pipelines.train fit --config $(CONFIG) $(ARGS)

evaluate: $(STAMP) ## Score CKPT (checkpoint or MLflow run id) at 1-16x its training length [CONFIG=...]
	@test -n "$(CKPT)" || { echo "error: set CKPT=<checkpoint path or MLflow run id>" >&2; exit 2; }
	$(PY) -m pipelines.eval.evaluate $(CKPT) $(if $(filter command line environment,$(origin CONFIG)),--config $(CONFIG)) $(ARGS)

compare: $(STAMP) ## Train CONFIG per scheme in SCHEMES="..." and seed in SEEDS (default "0 1 2"; finished runs are reused), compare with CIs
	@test -n "$(SCHEMES)" || { echo "error: set SCHEMES=\"none rope alibi ...\" (names in configs/posenc/)" >&2; exit 2; }
	$(PY) -m pipelines.studies.compare --config $(CONFIG) --schemes $(SCHEMES) --seeds $(or $(SEEDS),0 1 2) $(ARGS)

figures: $(STAMP) ## Regenerate docs/figures/*.png from the newest make train runs (DNA LM, forecaster)
	$(PY) -m pipelines.studies.figures --out docs/figures $(ARGS)

# -n 2: two pytest-xdist workers (one torch thread each, tests/conftest.py); --dist loadfile keeps a
# file's tests, and so its module-scoped trained fixtures, on one worker; --durations: where time goes.
test: $(STAMP) ## Run the fast test suite (what CI runs) on 2 workers, slowest 15 tests listed
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15 $(ARGS)

# smoke: one torch thread, as in make test's workers (on tiny ops a second thread mostly spins)
smoke: $(STAMP) ## Quick end-to-end check (< 30 s): every module imports, one tiny fit, predict from it
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m smoke tests/test_smoke.py $(ARGS)

test-all: $(STAMP) ## Run every test, slow ones included
	$(PY) -m pytest -q -m "slow or not slow" $(ARGS)

# The library alone (packaging/posenc/): a wheel whose only requirements are torch and numpy, built offline
# from posenc/ by the venv's setuptools; tests/test_posenc_wheel.py installs it into a fresh environment.
posenc-wheel: $(STAMP) ## Build the posenc-only wheel (torch + numpy, no pipelines) into dist/
	$(PY) packaging/posenc/build.py dist

lint: $(STAMP) ## ruff check
	$(BIN)/ruff check .

# ui / tracking-server: pipelines/tracking/server.py starts `mlflow server`. Loopback unless UI_HOST says
# otherwise; a server reachable from elsewhere (UI_HOST, or SERVER_NAME behind a TLS proxy) needs an admin
# login from MLFLOW_AUTH_ADMIN_USERNAME/_PASSWORD or AUTH_FILE (user:password, mode 600). Secrets reach
# it through the environment (BACKEND_URI) or files (BACKEND_URI_FILE, AUTH_FILE), never a command line.
AUTH_DIR ?= mlflow-auth
SERVER_OPTS = --host $(UI_HOST) --port $(UI_PORT) --auth-dir "$(AUTH_DIR)" $(if $(SERVER_NAME),--name $(SERVER_NAME)) \
  $(if $(AUTH_FILE),--credentials-file "$(AUTH_FILE)") $(if $(filter 1 yes true,$(AUTH)),--auth)
AUTH_DEPS = $(PY) -c "import flask_wtf" 2>/dev/null || $(PIP_INSTALL) -c requirements.lock -e ".[auth]"

ui: $(STAMP) ## Serve the MLflow UI on $(UI_HOST):$(UI_PORT) (loopback unless UI_HOST is set; then a login)
	@$(PY) -m pipelines.tracking.ui_url --db $(MLFLOW_DB) --host $(UI_HOST) --port $(UI_PORT)
	@$(AUTH_DEPS)
	$(PY) -m pipelines.tracking.server --db $(MLFLOW_DB) --workers 1 $(SERVER_OPTS)

tracking-server: $(STAMP) ## Shared MLflow server: BACKEND_URI[_FILE]=postgresql://… ARTIFACTS=<dir|s3://…> (docs/scaling.md)
	@test -n "$(ARTIFACTS)" || { echo "usage: BACKEND_URI=postgresql://user@host:5432/mlflow make tracking-server \
	  ARTIFACTS=/shared/mlartifacts [UI_HOST=0.0.0.0 SERVER_NAME=<name> AUTH_FILE=<file>] (docs/scaling.md)" >&2; exit 2; }
	@$(PY) -c "import psycopg" 2>/dev/null || $(PIP_INSTALL) -c requirements.lock -e ".[postgres]"
	@$(AUTH_DEPS)
	$(PY) -m pipelines.tracking.server --artifacts "$(ARTIFACTS)" \
	  $(if $(BACKEND_URI_FILE),--backend-uri-file "$(BACKEND_URI_FILE)") $(SERVER_OPTS)

clean: ## Remove outputs, the MLflow store and caches (keeps .venv)
	rm -rf outputs mlruns mlartifacts $(MLFLOW_DB) .pytest_cache .ruff_cache

.PHONY: experiments
experiments: $(STAMP) ## Run the literature's claims with their controls (configs/experiments/) [ONLY=name] [ARGS=--smoke]
	$(PY) -m pipelines.studies.claims $(if $(ONLY),--only $(ONLY)) $(ARGS)

.PHONY: publish-claims
publish-claims: $(STAMP) ## The published claims run: a worktree pinned at COMMIT (default HEAD, clean), docs generated [ARGS=--quick]
	$(PY) -m pipelines.studies.claims.publish $(if $(COMMIT),--commit $(COMMIT)) $(ARGS)

.PHONY: predict
predict: $(STAMP) ## Run CKPT (checkpoint, MLflow run id or models:/ URI) on INPUT, write OUTPUT
	@test -n "$(CKPT)" -a -n "$(INPUT)" -a -n "$(OUTPUT)" || \
	  { echo "usage: make predict CKPT=<ckpt|run id|models:/name/version> INPUT=<file> OUTPUT=<file> [ARGS=...]" >&2; exit 2; }
	$(PY) -m pipelines.inference.predict --ckpt "$(CKPT)" --input "$(INPUT)" --output "$(OUTPUT)" $(ARGS)

bench: $(STAMP) ## Throughput/memory vs x-transformers and hand SDPA -> bench_results.md (ARGS=--quick)
	@$(PY) -c "import x_transformers" 2>/dev/null || $(PIP_INSTALL) -c requirements.lock -e ".[bench]"
	$(PY) -m pipelines.studies.bench $(ARGS)

# The long-horizon forecasting benchmark (docs/ltsf.md): DATA is your copy of any file of the family
# (ETTh1.csv, weather.csv, …; none is shipped), run under its own protocol with one config per model.
LTSF_CONFIGS ?= configs/ltsf/posenc.yaml configs/ltsf/forecaster_extrapolate.yaml configs/ltsf/patchtst_etth1.yaml configs/ltsf/dlinear.yaml
# The mean of these configs' forecasts is one more model, named posenc+forecaster (docs/ltsf.md).
LTSF_ENSEMBLE ?= posenc forecaster
# The project's forecast, per horizon: the one of these models val prefers (docs/ltsf.md, "What val decides").
LTSF_CHOOSE ?= posenc forecaster posenc+forecaster
# Worker processes training the configs' children at once (one torch thread each); the budget's 2 cores.
LTSF_JOBS ?= 2
.PHONY: benchmark-ltsf
benchmark-ltsf: $(STAMP) ## any LTSF file under its protocol (ETT rule or custom, from the file; ARGS="--protocol ett|custom"): DATA=ETTh1.csv|weather.csv [HORIZONS=..] [SEEDS=..] [OUT=..] [ARGS=..]
	@test -n "$(DATA)" || { echo "usage: make benchmark-ltsf DATA=path/to/ETTh1.csv|weather.csv [HORIZONS=\"96 192 336 720\"] [SEEDS=\"0 1 2\"]" >&2; exit 2; }
	@$(PY) -c "import lightgbm, statsmodels" 2>/dev/null || $(PIP_INSTALL) -c requirements.lock -e ".[ltsf]" >/dev/null || true
	$(PY) -m pipelines.studies.ltsf --data "$(DATA)" --horizons $(or $(HORIZONS),96 192 336 720) \
	  --seeds $(or $(SEEDS),0 1 2) --configs $(LTSF_CONFIGS) --ensemble $(LTSF_ENSEMBLE) --choose-on-val $(LTSF_CHOOSE) \
	  --jobs $(LTSF_JOBS) --threads 1 --out $(or $(OUT),docs/ltsf_results) $(ARGS)

# The promoter benchmark (docs/promoters.md): DATA is a folder of promoter / non-promoter FASTA sets (CNNProm's,
# e.g. ../shared/data/promoters; a *non_prom* file is an organism's negatives) or "positives.fa negatives.fa".
PROMOTER_JOBS ?= 2
.PHONY: benchmark-promoters
benchmark-promoters: $(STAMP) ## promoter sets beside CNNProm, 5-fold CV x 3 seeds: DATA=<folder or "pos.fa neg.fa"> [SEEDS=..] [OUT=..] [ARGS="--quick"]
	@test -n "$(DATA)" || { echo "usage: make benchmark-promoters DATA=<folder or \"positives.fa negatives.fa\"> [SEEDS=\"0 1 2\"] [OUT=outputs/promoters] [ARGS=--quick]" >&2; exit 2; }
	$(PY) -m pipelines.studies.promoters --data $(DATA) --seeds $(or $(SEEDS),0 1 2) \
	  --jobs $(PROMOTER_JOBS) --threads 1 --out $(or $(OUT),outputs/promoters) $(ARGS)

# Scanning a genome with a promoter model (docs/promoters.md, "Scanning a genome"): one fold's model reads
# 1-8 kb windows of the shipped E. coli genome in one pass, beside the same model slid, a PWM and one-hot LR.
.PHONY: scan-promoters
scan-promoters: $(STAMP) ## one fold's scanning table and figures: DATA="promoters.fa non_promoters.fa" [OUT=..] [ARGS="--fold 1 --quick --ckpt .."]
	@test -n "$(DATA)" || { echo "usage: make scan-promoters DATA=\"promoters.fa non_promoters.fa\" [OUT=outputs/promoter_scan] [ARGS=\"--quick\"]" >&2; exit 2; }
	$(PY) -m pipelines.studies.promoter_scan --data $(DATA) --out $(or $(OUT),outputs/promoter_scan) $(ARGS)
