"""Load a trained model (checkpoint, MLflow run or MLflow model URI) and run it over long inputs.

``load_model(source)`` returns the project's own LightningModule (``DNALanguageModel``,
``FrameSegmenter``, …) in eval mode on the requested device; ``model.predict(...)`` then runs the
task's predictor (:mod:`pipelines.inference.dna`). Checkpoints load with ``torch.load(weights_only=True)``:
hyperparameters are primitive and the encoding is rebuilt from its ``{class_path, init_args}`` spec.

Long sequences are cut into windows of ``window`` tokens overlapping by ``overlap`` (all windows the
same length, the last one aligned to the end) and the per-token outputs stitched: a bidirectional
model keeps each position from the window where it lies furthest from an edge (the cut is the middle
of each overlap), a causal model from the first window holding it (so it keeps ≥ ``overlap`` tokens
of left context). For a model whose receptive field fits in the margin this is exactly a direct pass.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc import PosencError

META_KEY = "posenc_inference"  # checkpoint entry written by pipelines.tracking.registry.InferenceMetadata
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
RUN_MODEL = re.compile(r"^runs:/([0-9a-f]{32})/([^/]+)/?$")
URI_SCHEMES = ("runs:/", "models:/", "mlflow-artifacts:/")
DOWNLOAD_PREFIX = "posenc-model-"


def task_classes() -> dict[str, type]:
    """``{task_name: LightningModule class}`` for every task of the project."""
    from pipelines import DNALanguageModel, Forecaster, FrameSegmenter, MaskedDNAModel, SequenceClassifier

    classes = (DNALanguageModel, MaskedDNAModel, FrameSegmenter, SequenceClassifier, Forecaster)
    return {cls.task_name: cls for cls in classes}


# ----------------------------------------------------------------------------------------- loading
def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` with one-line errors for missing or damaged files."""
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
        lines = [ln.strip() for ln in str(exc).splitlines() if "Unsupported global" in ln]
        reason = lines[0] if lines else f"{type(exc).__name__}: {str(exc).strip()[:120]}"
        raise PosencError(f"{path}: cannot load the checkpoint safely (weights_only): {reason}") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise PosencError(f"{path}: not a Lightning checkpoint (no 'state_dict' entry)")
    return ckpt


def model_from_checkpoint(ckpt: dict[str, Any], source: str) -> torch.nn.Module:
    """Rebuild the task module named in ``ckpt`` and load its weights (strict)."""
    classes = task_classes()
    task = ckpt.get("posenc_task")
    if task not in classes:
        raise PosencError(f"{source}: checkpoint names task {task!r}; this project knows {sorted(classes)} "
                          "(no 'posenc_task' entry means it was not saved by a posenc task module)")
    hparams = dict(ckpt.get("hyper_parameters") or {})
    try:
        model = classes[task](**hparams)
    except PosencError as exc:
        raise PosencError(f"{source}: {exc}") from None
    except TypeError as exc:
        raise PosencError(f"{source}: hyperparameters do not fit {classes[task].__name__} ({exc})") from None
    missing, unexpected = model.load_state_dict(ckpt["state_dict"], strict=False)
    if missing or unexpected:
        what = f"missing weights {missing[:4]}" if missing else f"unexpected weights {unexpected[:4]}"
        raise PosencError(f"{source}: checkpoint does not match {type(model).__name__}: {what}")
    model.posenc_inference = dict(ckpt.get(META_KEY) or {})
    if not model.posenc_inference and ckpt.get("datamodule_hyper_parameters"):
        model.posenc_inference = {"data": dict(ckpt["datamodule_hyper_parameters"])}
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
    path = resolve_checkpoint(str(source), tracking_uri)
    try:
        ckpt = read_checkpoint(path)
    finally:
        downloaded = [p for p in path.parents if p.name.startswith(DOWNLOAD_PREFIX)]
        if downloaded:  # a copy of MLflow artifacts made for this call
            shutil.rmtree(downloaded[-1], ignore_errors=True)
    if task is not None:
        from pipelines.tasks.base import check_task

        check_task(ckpt, task, str(source))
    model = model_from_checkpoint(ckpt, str(source))
    device = torch.device(device) if device is not None else default_device()
    return model.to(device).eval()


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_checkpoint(source: str, tracking_uri: str | None = None) -> Path:
    """A local checkpoint file for a path, run id or MLflow URI (MLflow artifacts are downloaded)."""
    local = Path(source)
    if local.is_file():
        return local
    if local.is_dir():
        return find_checkpoint(local, source)
    named = RUN_MODEL.match(source)
    if named:  # runs:/<run id>/<model name>: MLflow 3 keeps logged models outside the run's artifacts
        model_id = logged_model_id(named.group(1), tracking_uri, name=named.group(2))
        if model_id:
            return find_checkpoint(download(f"models:/{model_id}", tracking_uri), source)
    if source.startswith(URI_SCHEMES):
        return find_checkpoint(download(source, tracking_uri), source)
    if RUN_ID.match(source):
        model_id = logged_model_id(source, tracking_uri)  # the model registered from the run, if any
        uri = f"models:/{model_id}" if model_id else f"runs:/{source}/"
        return find_checkpoint(download(uri, tracking_uri), source)
    if source.endswith(".ckpt") or "/" in source or "\\" in source:
        raise PosencError(f"{source}: checkpoint file not found")
    raise PosencError(f"{source}: neither a checkpoint file, an MLflow run id (32 hex digits) nor an MLflow "
                      "model URI (runs:/…, models:/…)")


def _store(tracking_uri: str | None) -> str:
    from pipelines.tracking.store import tracking_uri as default_uri

    return tracking_uri or default_uri()


def logged_model_id(run_id: str, tracking_uri: str | None, name: str | None = None) -> str | None:
    """The last MLflow model (named ``name``, if given) logged by run ``run_id``, else ``None``."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        run = mlflow.MlflowClient(_store(tracking_uri)).get_run(run_id)
    except MlflowException as exc:
        reason = str(exc).strip().splitlines()[0][:200]
        store = _store(tracking_uri)
        raise PosencError(f"{run_id}: not found in the MLflow store {store} ({reason})") from None
    client = mlflow.MlflowClient(_store(tracking_uri))
    ids = [o.model_id for o in (run.outputs.model_outputs if run.outputs is not None else [])]
    if name is not None:
        ids = [i for i in ids if client.get_logged_model(i).name == name]
    return ids[-1] if ids else None


def download(uri: str, tracking_uri: str | None) -> Path:
    """Download an MLflow artifact URI into a fresh temporary folder (clear error if unknown)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    store = _store(tracking_uri)
    dst = Path(tempfile.mkdtemp(prefix=DOWNLOAD_PREFIX))
    try:
        got = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst), tracking_uri=store,
                                                  registry_uri=store)
        return Path(got)
    except MlflowException as exc:
        reason = str(exc).strip().splitlines()[0][:200]
        raise PosencError(f"{uri}: not found in the MLflow store {store} ({reason})") from None


def find_checkpoint(folder: Path, source: str) -> Path:
    """The checkpoint inside a downloaded artifact: a file as is; in a folder the registered model's
    checkpoint, else Lightning's ``best`` checkpoint, else the only ``.ckpt``."""
    if folder.is_file():
        return folder
    found = sorted(folder.rglob("*.ckpt"))
    if not found:
        raise PosencError(f"{source}: no checkpoint (.ckpt) among its MLflow artifacts")
    for pick in (lambda p: p.parent.name == "artifacts", lambda p: p.stem == "best"):
        chosen = [p for p in found if pick(p)]
        if chosen:
            return chosen[0]
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in found[:4])
        raise PosencError(f"{source}: several checkpoints among its artifacts ({names}); "
                          "give a runs:/ URI to one")
    return found[0]


# ----------------------------------------------------------------------------------------- windows
def window_starts(n: int, window: int, overlap: int) -> list[int]:
    """Starts of windows of ``window`` tokens every ``window - overlap`` tokens covering ``n``
    tokens; the last window ends at ``n`` (one window of ``n`` tokens when ``n <= window``)."""
    if window <= 0 or not 0 <= overlap < window:
        raise PosencError(f"window must be ≥ 1 and 0 ≤ overlap < window, got {window} and {overlap}")
    if n <= window:
        return [0]
    step = window - overlap
    starts = list(range(0, n - window, step))
    return starts + [n - window]


def keep_ranges(starts: list[int], width: int, n: int, causal: bool) -> list[tuple[int, int]]:
    """``[lo, hi)`` of the record each window contributes (they tile ``[0, n)``).

    Bidirectional: cut at the middle of each overlap; causal: a window hands over where the
    previous one ends (each kept position then has all of that window's left context).
    """
    cuts = [0]
    for a, b in zip(starts, starts[1:], strict=False):
        end_a = a + width
        cuts.append(end_a if causal else (b + end_a) // 2)
    cuts.append(n)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def run_windows(
    tokens: np.ndarray,
    fn: Callable[[Tensor], Tensor],
    window: int,
    overlap: int,
    causal: bool,
    batch_size: int = 32,
    device: torch.device | None = None,
    progress: Callable[[int], object] | None = None,
) -> np.ndarray:
    """Per-token outputs (n, F) of ``fn`` over a long token sequence, windowed and stitched.

    Args:
        tokens: (n,) token ids.
        fn: maps a batch of windows (B, W) to per-token outputs (B, W, F).
        window: tokens per window (``0``: the whole sequence in one pass).
        overlap: tokens shared by consecutive windows.
        causal: stitching rule (see :func:`keep_ranges`).
        batch_size: windows per forward pass.
        progress: called with the number of tokens finished after each batch.
    """
    n = len(tokens)
    window = n if window == 0 else window
    starts = window_starts(n, window, min(overlap, window - 1))
    width = min(window, n)
    keep = keep_ranges(starts, width, n, causal)
    ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=device)
    out: np.ndarray | None = None
    for b in range(0, len(starts), batch_size):
        chunk = starts[b : b + batch_size]
        batch = torch.stack([ids[s : s + width] for s in chunk])  # (B, W)
        with torch.inference_mode():
            y = fn(batch).float().cpu().numpy()  # (B, W, F)
        if out is None:
            out = np.empty((n, y.shape[-1]), dtype=np.float32)
        for s, (lo, hi), row in zip(chunk, keep[b : b + batch_size], y, strict=True):
            out[lo:hi] = row[lo - s : hi - s]
        if progress is not None:
            progress(keep[b + len(chunk) - 1][1] - keep[b][0])
    assert out is not None
    return out


def check_window(model: torch.nn.Module, window: int, n: int) -> None:
    """A clear error when the encoding does not define the positions a window would need."""
    pe = model.backbone.pe
    need = n if window == 0 else min(window, n)
    if pe.max_len is not None and need > pe.max_len:
        what = "--window 0 (whole records)" if window == 0 else f"window {window}"
        raise PosencError(f"{type(pe).__name__} defines positions 0..{pe.max_len - 1} only: {what} needs "
                          f"{need} positions; use --window ≤ {pe.max_len}")
    trained = inference_meta(model).get("data", {}).get("seq_len")
    if not pe.meta.extrapolates and trained and need > trained:
        warnings.warn(f"{type(pe).__name__} does not extrapolate: positions past the training length "
                      f"{trained} (window of {need}) were never trained", UserWarning, stacklevel=3)


def predict(model: torch.nn.Module, data: Any, **kwargs: Any) -> Any:
    """Run the predictor of ``model``'s task on ``data`` (see :mod:`pipelines.inference.dna`)."""
    from pipelines.inference.dna import PREDICTORS

    task = getattr(model, "task_name", None)
    if task not in PREDICTORS:
        raise PosencError(f"no predictor for task {task!r} (known: {sorted(PREDICTORS)})")
    was_training = model.training
    model.eval()
    try:
        return PREDICTORS[task](model, data, **kwargs)
    finally:
        model.train(was_training)


def inference_meta(model: torch.nn.Module) -> dict[str, Any]:
    """What the model needs besides its weights (tokenizer, class names, scalers): set from the
    datamodule during training and stored in checkpoints; ``{}`` for a bare module."""
    return dict(getattr(model, "posenc_inference", None) or {})


__all__ = ["check_window", "find_checkpoint", "inference_meta", "keep_ranges", "load_model",
           "model_from_checkpoint", "predict", "read_checkpoint", "resolve_checkpoint", "run_windows",
           "window_starts"]
