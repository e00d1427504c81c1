"""Load a trained model (checkpoint, MLflow run or MLflow model URI) as the project's own module.

``load_model(source)`` returns the task's LightningModule (``DNALanguageModel``, ``FrameSegmenter``,
…) in eval mode on the requested device; ``model.predict(...)`` then runs the task's predictor.
Checkpoints are found by :mod:`pipelines.inference.resolve` and read with
``torch.load(weights_only=True)`` after an integrity check, and upgraded there, once, from the spelling
of the code that wrote them (:mod:`pipelines.tasks.upgrade`): hyperparameters are primitive and the
encoding is rebuilt from its ``{class_path, init_args}`` spec; the task class comes from the
checkpoint's ``posenc_task`` through the task registry.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from pipelines.inference.resolve import resolve
from pipelines.safety import weights_only_reason
from pipelines.tasks import task_class
from pipelines.tasks.base import check_task
from pipelines.tasks.resources import check_checkpoint
from pipelines.tasks.upgrade.checkpoint import upgrade_checkpoint
from posenc import PosencError

META_KEY = "posenc_inference"  # checkpoint entry written by pipelines.inference.registry.RegisterModel


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` with one-line errors for missing or damaged files, upgraded to
    the current spelling (:func:`~pipelines.tasks.upgrade.checkpoint.upgrade_checkpoint`)."""
    path = Path(path)
    if not path.is_file():
        raise PosencError(f"{path}: checkpoint file not found")
    if not zipfile.is_zipfile(path):
        raise PosencError(f"{path}: not a complete PyTorch checkpoint (truncated, or not a .ckpt file)")
    with zipfile.ZipFile(path) as archive:  # torch.load does not check the CRCs: damaged tensors would load
        damaged = archive.testzip()
    if damaged is not None:
        raise PosencError(f"{path}: checkpoint is corrupted (CRC mismatch in {damaged!r})")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # damaged archive, or an object weights_only loading refuses
        reason = weights_only_reason(exc)
        raise PosencError(f"{path}: cannot load the checkpoint safely (weights_only): {reason}") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise PosencError(f"{path}: not a Lightning checkpoint (no 'state_dict' entry)")
    return upgrade_checkpoint(ckpt, str(path))


def model_from_checkpoint(ckpt: dict[str, Any], source: str) -> torch.nn.Module:
    """Rebuild the task module named in ``ckpt`` and load its weights (strict)."""
    try:
        cls = task_class(ckpt.get("posenc_task"))
    except PosencError as exc:
        raise PosencError(f"{source}: {exc}") from None
    hparams = dict(ckpt.get("hyper_parameters") or {})
    check_checkpoint(hparams, source)  # a d_model of 65536 is refused before it is built
    try:
        model = cls(**hparams)
    except PosencError as exc:
        raise PosencError(f"{source}: {exc}") from None
    except TypeError as exc:
        raise PosencError(f"{source}: hyperparameters do not fit {cls.__name__} ({exc})") from None
    missing, unexpected = model.load_state_dict(ckpt["state_dict"], strict=False)
    if missing or unexpected:
        what = f"missing weights {missing[:4]}" if missing else f"unexpected weights {unexpected[:4]}"
        raise PosencError(f"{source}: checkpoint does not match {type(model).__name__}: {what}")
    model.posenc_inference = dict(ckpt.get(META_KEY) or {})
    saved = ckpt.get("datamodule_hyper_parameters") or {}
    if not model.posenc_inference and saved:  # not registered: the tokenizer and length of the saved windows
        model.posenc_inference = {"data": dict(saved.get("windows") or {})}
    return model


def load_model(
    source: str | Path, device: str | torch.device | None = None, *, task: str | None = None,
    tracking_uri: str | None = None,
) -> torch.nn.Module:
    """The trained task module, in eval mode on ``device`` (default: CUDA if available, else CPU).

    Args:
        source: a ``.ckpt`` path, an MLflow run id (32 hex digits), or an MLflow model URI
            (``runs:/<run id>/<path>``, ``models:/<name>/<version>``, ``models:/<name>@<alias>``).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``…
        task: expected task name (``dna_lm``, ``dna_segment``…): a checkpoint of another task is
            an error naming both.
        tracking_uri: MLflow store for run ids and URIs (default ``$MLFLOW_TRACKING_URI`` or
            ``sqlite:///mlflow.db``).

    Raises:
        PosencError: missing/truncated checkpoint, unknown run or model, checkpoint of another
            task, encoding class that cannot be imported (named in the message).
    """
    with resolve(source, tracking_uri) as found:
        ckpt = read_checkpoint(found.checkpoint)
    if task is not None:
        check_task(ckpt, task, str(source))
    model = model_from_checkpoint(ckpt, str(source))
    device = torch.device(device) if device is not None else default_device()
    return model.to(device).eval()


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


__all__ = ["META_KEY", "default_device", "load_model", "model_from_checkpoint", "read_checkpoint"]
