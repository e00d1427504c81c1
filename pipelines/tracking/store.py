"""MLflow wiring: the logger defaults, the resolved config as a run artifact, run helpers."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import MLFlowLogger

from pipelines.console import scrub_library_lines
from pipelines.console.scrub import scrub_run_tags, scrub_text

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
#: MLflow's settings for every command (a value in the environment wins). MLflow prints a run's URL
#: itself when the run ends ("View run … at http://user:password@host/…"): off, the run summary says
#: where the run is, scrubbed. A store that does not answer was retried 7 times with a doubling wait,
#: 264 s in silence: 3 tries, ~12 s, each announced (:class:`RetryLine`).
STORE_ENV = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
             "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2"}
# MLflow 3's UI reads an experiment's kind from this tag (the value its own "Machine learning" switch
# writes): the project's experiments hold model-training runs, not GenAI traces.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"


class RetryLine(logging.Handler):
    """One line on stderr when a request to the MLflow store is first retried (urllib3 logs each retry;
    nothing showed them): which host (never its user-info), why, and how long the retries may take."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        host = str((getattr(record, "__urllib3-retry-warning", None) or {}).get("host", "?"))
        if not str(record.msg).startswith("Retrying") or host in self.said:
            return
        self.said.add(host)
        scrub_library_lines()  # MLflow is loaded by now: its own lines are scrubbed too
        cause = str(record.args[1] if len(record.args or ()) > 1 else "")
        why = next((w for w in ("Connection refused", "timed out", "Name or service not known",
                                "Connection reset") if w in cause), "no answer")
        print(f"warning: the MLflow store at {host} does not answer ({why}); retrying {retry_budget()} "
              "(MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR and "
              "MLFLOW_HTTP_REQUEST_TIMEOUT set this)", file=sys.stderr, flush=True)


def retry_budget() -> str:
    """How MLflow's settings retry a store that does not answer, in words (urllib3 waits 0, 2f, 4f… s
    between tries, f the backoff factor)."""
    tries = int(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7"))
    factor = float(os.environ.get("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "2"))
    timeout = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    wait = sum(min(factor * 2 ** (k - 1), 120.0) for k in range(2, tries + 1))
    return f"up to {tries} times over ~{wait:.0f} s (each try waits up to {timeout} s for an answer)"


def configure_store() -> None:
    """:data:`STORE_ENV` as defaults and :class:`RetryLine` on urllib3's retries (once per process)."""
    for key, value in STORE_ENV.items():
        os.environ.setdefault(key, value)
    pool = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(h, RetryLine) for h in pool.handlers):
        pool.addHandler(RetryLine())


configure_store()  # every command that tracks imports this module before it opens a store


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` if set, else the project's sqlite store (never MLflow's file store)."""
    return os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_TRACKING_URI)


def mlflow_logger_defaults(experiment: str = "posenc") -> dict[str, Any]:
    """Trainer ``logger`` default as a class_path/init_args dict (overridable from YAML)."""
    return {
        "class_path": "lightning.pytorch.loggers.MLFlowLogger",
        "init_args": {
            "experiment_name": experiment,
            "tracking_uri": tracking_uri(),
            "log_model": True,  # logs the best checkpoint as a run artifact after fit
        },
    }


def mlflow_loggers(trainer: Any) -> list[MLFlowLogger]:
    """The trainer's MLflow loggers (where a run's tags and artifacts go), on every rank."""
    return [lg for lg in trainer.loggers if isinstance(lg, MLFlowLogger)]


def mlflow_logger_args(cfg: Any) -> Any | None:
    """The ``init_args`` of a parsed config's trainer logger when it is an ``MLFlowLogger`` (``None``:
    the run logs elsewhere, or nowhere)."""
    logger = (cfg.get("trainer") or {}).get("logger")
    mlflow = hasattr(logger, "init_args") and "MLFlowLogger" in str(logger.class_path)
    return logger.init_args if mlflow else None


class LogConfigToMLflow(SaveConfigCallback):
    """Log the resolved config to the MLflow run as ``config.yaml`` (the default saver writes to
    ``trainer.log_dir``, which is None with a sqlite store), scrubbed like the run's tags."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved or trainer.global_rank != 0:
            return
        self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def save_config(self, trainer, pl_module, stage: str) -> None:
        # the parsed config (validated when it was parsed: the same text, without a second validation)
        text = scrub_text(self.parser.dump(self.config, skip_none=False, skip_validation=True))
        for logger in mlflow_loggers(trainer):
            mark_training(logger.experiment, logger.experiment_id)
            logger.experiment.log_text(logger.run_id, text, "config.yaml")
            scrub_run_tags(logger.experiment, logger.run_id)  # MLflow's source path, the user's tags


@contextmanager
def new_store_lock(uri: str | None) -> Iterator[None]:
    """Hold an exclusive lock while a *new* sqlite store may be created.

    MLflow creates and migrates the tables of a new sqlite store without locking, so two runs started
    together on a fresh store race on its schema (``duplicate column name``). The lock file lives in
    the temp folder (nothing is written next to the store) and is only taken while the database file
    does not exist yet; an existing store is opened without it.
    """
    path = Path(uri[len("sqlite:///"):]) if uri and uri.startswith("sqlite:///") else None
    if path is None or str(path) == ":memory:" or (path.is_file() and path.stat().st_size > 0):
        yield
        return
    import fcntl  # optional: fcntl, POSIX only

    key = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"posenc-mlflow-{key}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_summary(logger: MLFlowLogger, prefixes: tuple[str, ...] = ("val/", "test/", "baseline/"),
                model_uri: str | None = None) -> str:
    """The run's final metrics under ``prefixes``, read back from the store (what the UI shows), the
    registered model and where the run is in the UI (``make ui``)."""
    from pipelines.tracking.ui_url import run_url  # lazy: ui_url is a `python -m` entry point

    run = logger.experiment.get_run(logger.run_id)
    metrics = {k: v for k, v in run.data.metrics.items() if k.startswith(prefixes) and "_by_" not in k}
    lines = [f"MLflow run {logger.run_id} ({run.info.run_name}) in {scrub_text(logger._tracking_uri)}"]
    lines += [f"  {key:<40} {value:.4f}" for key, value in sorted(metrics.items())]
    if model_uri:
        lines.append(f"  model: {model_uri} (make predict CKPT={model_uri} INPUT=… OUTPUT=…)")
    lines.append(f"  see it: make ui, then {run_url(run.info.experiment_id, logger.run_id)}")
    return "\n".join(lines)


def experiment_id(client: Any, experiment: str) -> str:
    """The id of MLflow experiment ``experiment``, created if missing (for the caller's parent run);
    two sweeps started together may both try to create it, and the second then takes the first one's."""
    from mlflow.exceptions import MlflowException  # heavy: mlflow, loaded only when tracking

    exp = client.get_experiment_by_name(experiment)
    if exp is not None:
        mark_training(client, exp.experiment_id, exp.tags)
        return exp.experiment_id
    try:
        return client.create_experiment(experiment, tags={EXPERIMENT_KIND_TAG: TRAINING_KIND})
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return experiment_id(client, experiment)


def mark_training(client: Any, exp_id: str, tags: dict[str, str] | None = None) -> None:
    """Tag experiment ``exp_id`` as one of model-training runs (:data:`EXPERIMENT_KIND_TAG`), so that
    MLflow's UI shows its runs table rather than its GenAI views; a kind already set (a person's
    choice in the UI) is kept. ``tags``: the experiment's tags when the caller has them already."""
    if tags is None:
        tags = client.get_experiment(exp_id).tags
    if EXPERIMENT_KIND_TAG not in tags:
        client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
