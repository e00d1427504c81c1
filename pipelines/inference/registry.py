"""What inference needs, saved at training time: the data description in every checkpoint, and the
trained model registered in MLflow so ``models:/<name>/<version>`` loads it.

:class:`RegisterModel` is a Lightning callback (the CLI adds it as ``--register.*``):

* from ``setup`` on it keeps the task's primitive description of the datamodule on the module
  (``posenc_inference``, from ``TaskModule.describe_data``: tokenizer k-mer/stride and training
  length, class names, or for time series the columns, calendar features and the scalers fitted on
  the training rows) and writes it into every checkpoint (``checkpoint["posenc_inference"]``);
* after fit (``register: true``, an MLflow logger present) it logs the best checkpoint, stripped of
  optimizer state, as an MLflow pyfunc model with a signature, an input example and explicit pip
  requirements (no environment inference, so logging is fast) and registers it under ``name``
  (default: the run name, e.g. ``DNALanguageModel-RoPE``) through the MLflow client, with a model
  card (:mod:`pipelines.tracking.card`) as the description and tags of the model and the version.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import types
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import lightning as L
import torch

from pipelines.console.scrub import scrub_logged_model_tags
from pipelines.inference.loading import META_KEY, load_model
from pipelines.tracking.card import ModelCard, card_metrics, command_line, from_training, write_card
from pipelines.tracking.store import mlflow_loggers

log = logging.getLogger(__name__)
KEEP_KEYS = ("state_dict", "hyper_parameters", "posenc_task", "config_version", META_KEY, "epoch",
             "global_step", "pytorch-lightning_version", "datamodule_hyper_parameters")


def slim_checkpoint(path: str | Path, out: Path) -> Path:
    """Copy of a checkpoint with only what inference needs (no optimizer/loop state)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    torch.save({k: ckpt[k] for k in KEEP_KEYS if k in ckpt}, out)
    return out


def pip_requirements() -> list[str]:
    """Pinned versions of what loading the model imports (explicit: MLflow infers nothing)."""

    out = []
    for pkg in ("torch", "lightning", "mlflow", "numpy", "pandas", "biopython", "scikit-learn"):
        try:
            out.append(f"{pkg}=={version(pkg).split('+')[0]}")
        except PackageNotFoundError:
            continue
    return out


def column_type(series: Any, input_side: bool) -> str:
    """MLflow column type of a pandas column. Integers are ``double`` on the input side: a missing
    value arrives as NaN, which only a float column holds (MLflow's own advice); ``long`` on output."""
    kind = series.dtype.kind
    if kind in "iu":
        return "double" if input_side else "long"
    return {"b": "boolean", "f": "double", "M": "datetime"}.get(kind, "string")


def signature_for(example: Any, output: Any) -> Any:
    """The model signature, from explicit column types when input and output are DataFrames (no
    schema inference, so no inference hints), else MLflow's inference."""
    import pandas as pd  # heavy: pandas
    from mlflow.models import ModelSignature, infer_signature  # heavy: mlflow, loaded only when tracking
    from mlflow.types import ColSpec, Schema  # heavy: mlflow, loaded only when tracking

    if not (isinstance(example, pd.DataFrame) and isinstance(output, pd.DataFrame)):
        return infer_signature(example, output)

    def schema(frame: pd.DataFrame, input_side: bool) -> Schema:
        return Schema([ColSpec(column_type(frame[c], input_side), str(c)) for c in frame.columns])

    return ModelSignature(inputs=schema(example, True), outputs=schema(output, False))


def log_pyfunc(ckpt: Path, run_id: str, tracking_uri: str, example: Any, output: Any) -> Any:
    """Log ``ckpt`` as a pyfunc model of run ``run_id``; returns MLflow's ``ModelInfo``."""
    import mlflow  # heavy: mlflow, loaded only when tracking
    from mlflow.models import Model  # heavy: mlflow, loaded only when tracking
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri  # heavy: mlflow

    # lazy: MLflow's model-from-code file, named only when logging a model
    import pipelines.inference.pyfunc as code

    client = mlflow.MlflowClient(tracking_uri)
    # MLflow files a logged model under the active (else the default) experiment, not its run's: the
    # run's own, so the experiment's Models tab lists it (the link `make ui` prints)
    saved = os.environ.get("MLFLOW_EXPERIMENT_ID")
    os.environ["MLFLOW_EXPERIMENT_ID"] = client.get_run(run_id).info.experiment_id
    try:
        with _use_tracking_uri(tracking_uri):
            info = Model.log(None, portable_pyfunc(), name="posenc_model", python_model=code.__file__,
                             artifacts={"checkpoint": str(ckpt)}, signature=signature_for(example, output),
                             input_example=example, pip_requirements=pip_requirements(), run_id=run_id)
    finally:
        if saved is None:
            del os.environ["MLFLOW_EXPERIMENT_ID"]
        else:
            os.environ["MLFLOW_EXPERIMENT_ID"] = saved
    if getattr(info, "model_id", None):
        scrub_logged_model_tags(client, info.model_id)
    return info


def portable_pyfunc() -> Any:
    """``mlflow.pyfunc`` as the flavor of :meth:`mlflow.models.Model.log`, except that the saved
    ``MLmodel`` names the model's code file by its name alone: MLflow records its absolute path
    (``model_code_path``: a home folder, a user name), and reads back only its base name."""
    import mlflow  # heavy: mlflow, loaded only when tracking

    def save_model(path: str, mlflow_model: Any, **kwargs: Any) -> None:
        mlflow.pyfunc.save_model(path=path, mlflow_model=mlflow_model, **kwargs)
        conf = mlflow_model.flavors.get(mlflow.pyfunc.FLAVOR_NAME, {})
        if conf.get("model_code_path"):
            conf["model_code_path"] = Path(conf["model_code_path"]).name
            mlflow_model.save(str(Path(path) / "MLmodel"))

    return types.SimpleNamespace(__name__="mlflow.pyfunc", save_model=save_model)


def register_version(client: Any, name: str, info: Any, run_id: str, card: ModelCard) -> str:
    """Register the logged model ``info`` as a new version of ``name`` (created if new), with the
    card as description and tags; returns the version."""
    from mlflow.exceptions import MlflowException  # heavy: mlflow, loaded only when tracking

    try:
        client.create_registered_model(name, tags=card.tags(), description=card.markdown())
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        write_card(client, name, None, card)  # an existing registered model shows its newest card
    version = client.create_model_version(name, source=info.model_uri, run_id=run_id, tags=card.tags(),
                                          description=card.markdown(), model_id=info.model_id)
    return str(version.version)


class RegisterModel(L.Callback):
    """Keep the data description for inference and register the trained model in MLflow.

    Args:
        register: log and register the best checkpoint as an MLflow model after fit
            (``--register.register false`` skips it; the data description is always kept).
        name: registered model name (default: the MLflow run name, e.g. ``DNALanguageModel-RoPE``).
        published: numbers a paper reports on the same data (e.g. ``{Sn: 0.90, Sp: 0.96, CC: 0.84}``),
            shown in the model card beside the run's own.
        published_source: the paper, and where its protocol differs from the run's.
    """

    def __init__(self, register: bool = True, name: str | None = None,
                 published: dict[str, float] | None = None, published_source: str = "") -> None:
        self.register, self.name = register, name
        self.published, self.published_source = dict(published or {}), published_source
        self.model_uri: str | None = None
        self.seconds: float | None = None
        self.log_seconds: float | None = None
        self.command: str = command_line()  # the CLI sets the command it was started with
        self.card: ModelCard | None = None
        self.registered_name: str | None = None
        self.registered_version: str | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        meta = pl_module.describe_data(getattr(trainer, "datamodule", None))
        if meta or not getattr(pl_module, "posenc_inference", None):
            pl_module.posenc_inference = meta

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint[META_KEY] = dict(getattr(pl_module, "posenc_inference", {}) or {})

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:

        loggers = mlflow_loggers(trainer)
        if not self.register or not loggers or trainer.global_rank != 0 or trainer.interrupted:
            return
        try:
            self.register_best(trainer, loggers[0])
        except Exception as exc:  # never lose a finished training to a registry problem
            log.warning("MLflow model registration failed (%s: %s); the checkpoint is kept",
                        type(exc).__name__, exc)

    def register_best(self, trainer: L.Trainer, logger: Any) -> None:
        """Log the best checkpoint (slimmed) as a pyfunc model of the run and register it."""
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="posenc-register-") as tmp:
            best = getattr(trainer.checkpoint_callback, "best_model_path", "") or ""
            ckpt = Path(tmp) / "model.ckpt"
            if not (best and Path(best).is_file()):
                best = Path(tmp) / "last.ckpt"
                trainer.save_checkpoint(best, weights_only=True)
            slim_checkpoint(best, ckpt)
            name = self.name or logger.experiment.get_run(logger.run_id).info.run_name
            model = load_model(ckpt, device="cpu")
            example = model.input_example(getattr(trainer, "datamodule", None))
            output = model.predict(example)
            logging_start = time.perf_counter()
            info = log_pyfunc(ckpt, logger.run_id, logger._tracking_uri, example, output)
            client = logger.experiment
            self.card = from_training(trainer, trainer.lightning_module, self.command, logger.run_id)
            self.card.published, self.card.published_source = self.published, self.published_source
            self.card.metrics = card_metrics(client.get_run(logger.run_id).data.metrics)
            version = register_version(client, name, info, logger.run_id, self.card)
        self.seconds = time.perf_counter() - start
        self.log_seconds = time.perf_counter() - logging_start  # MLflow's part: log + register
        self.registered_name, self.registered_version = name, version
        self.model_uri = f"models:/{name}/{version}"
        log.info("registered %s in %.2f s", self.model_uri, self.seconds)
        print(f"MLflow model {self.model_uri} (registered in {self.seconds:.2f} s, of which MLflow logging "
              f"{self.log_seconds:.2f} s)", flush=True)
