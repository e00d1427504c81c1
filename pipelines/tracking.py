"""MLflow wiring: the logger defaults, the resolved config as a run artifact, run helpers."""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import MLFlowLogger

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


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


def mlflow_loggers(trainer) -> list[MLFlowLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, MLFlowLogger)]


class LogConfigToMLflow(SaveConfigCallback):
    """Log the resolved config to the MLflow run as ``config.yaml`` (the default saver writes to
    ``trainer.log_dir``, which is None with a sqlite store)."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved or trainer.global_rank != 0:
            return
        self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def save_config(self, trainer, pl_module, stage: str) -> None:
        text = self.parser.dump(self.config, skip_none=False)
        for logger in mlflow_loggers(trainer):
            logger.experiment.log_text(logger.run_id, text, "config.yaml")
