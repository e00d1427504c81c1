"""The LTSF benchmark's model configs, trained by the sweep runner (:func:`pipelines.eval.sweep.train_run`).

A benchmark model config (``configs/ltsf/*.yaml``) is an ordinary CLI layer: the model, the loader's
batch size and windows per epoch, the trainer's budget, early stopping on ``val/loss`` and
:class:`LTSFProtocol`. :func:`cli_config` adds the protocol's overlay (the windows of the file, the
best-val-epoch checkpoint, what to score). :class:`LTSFProtocol` is the callback that does
what the protocol needs around the fit: the closed-form warm start of the linear path before it, and
after it the choice between the best epoch and the warm start on val and the scaled metrics of every
val and test window (the Forecaster's own test pass is off). Each model × horizon × seed is a nested
child of the benchmark's parent run, as ``compare``'s are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from datamodules.timeseries.ltsf import scaled_errors
from pipelines.eval.statistics import Estimate, estimate
from pipelines.eval.sweep import config_key, train_run
from pipelines.studies.ltsf.ensemble import prediction_dir, save_forecast
from pipelines.studies.ltsf.models import PROTOCOL, forecast, longer_lookbacks, warm_start

#: contiguous val blocks the spread of a trained model's gain over its warm start is read on (block_gain)
VAL_BLOCKS = 10
NAMESPACE = "posenc.ltsf"  # the children's tags: <namespace>.model/.horizon (ours), .seed/.key/.complete
DATAMODULE = "datamodules.timeseries.ltsf_data.LTSFDataModule"


def window_errors(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Each window's MSE (n,) in float64 over its steps and channels, of (n, H, C) arrays."""
    return np.mean((pred.astype(np.float64) - truth.astype(np.float64)) ** 2, axis=(1, 2))


def block_gain(reference: np.ndarray, candidate: np.ndarray, n_blocks: int = VAL_BLOCKS) -> Estimate:
    """How the candidate's gain over the reference spreads over val's time: per contiguous block of
    windows in time order, the log ratio of the two MSEs (log(reference / candidate), > 0: the
    candidate is better), as a mean with its 95 % Student-t interval over ``n_blocks`` blocks; scale-free,
    so a stormy block's large MSE does not drown the others. Reported beside the choice, which it does
    not make: as a rule (keep the trained model only where this interval lies above 0) it kept the warm
    start on Weather at horizon 96 for seeds 0 and 1, whose 0.027 mean log ratio (val MSE 0.4358 → about
    0.41) its interval over ten two-day blocks of weather could not call (docs/ltsf.md)."""
    if reference.shape != candidate.shape or reference.ndim != 1:
        raise ValueError(f"per-window errors of one shape expected, got {reference.shape} and "
                         f"{candidate.shape}")
    blocks = np.array_split(np.arange(len(reference)), min(n_blocks, len(reference)))
    return estimate([np.log(reference[b].mean() / candidate[b].mean()) for b in blocks])


class LTSFProtocol(Callback):
    """Warm start before the fit; after it, the model the protocol reports and its scaled metrics.

    Before training (``setup``, so the frozen path is outside the optimiser): with
    ``linear_warm_start`` the model's linear path is ridge in closed form on every train window
    (:func:`~pipelines.studies.ltsf.models.warm_start`) and its val MSE is noted. After training
    (``on_fit_end``): the best val epoch's weights are loaded, and replaced by the warm start when no
    epoch beat it on val (the kept start checkpointed as ``warm_start.ckpt``, the run's best
    checkpoint; how the gain spreads over ``val_blocks`` blocks of val, :func:`block_gain`, is
    reported as ``val_gain``); then ``val/mse_scaled``,
    ``test/mse_scaled``, ``test/mae_scaled`` (every window, float64) and ``test/mse_scaled_L<n>`` per
    ``test_lookbacks`` are logged to the run, and what was chosen as the tag ``posenc.ltsf.chosen``
    (both also in ``result``).

    Args:
        name: the model's label in the benchmark's rows, run names and the ``posenc.ltsf.model`` tag.
        linear_warm_start: fit the linear path before training (the model needs ``fit_linear_path``)
            and keep that start when no epoch beats it on val.
        test: forecast the test windows (``False``: model selection, val only).
        test_lookbacks: also score the test targets from these longer lookbacks.
        val_blocks: contiguous val blocks the reported spread of the trained model's gain is read on.
        predictions: a folder to save the reported model's val and test forecasts in (``val.npy``,
            ``test.npy``: :func:`~pipelines.studies.ltsf.ensemble.save_forecast`), for ``--ensemble``.
    """

    def __init__(self, name: str | None = None, linear_warm_start: bool = False, test: bool = True,
                 test_lookbacks: list[int] | None = None, val_blocks: int = VAL_BLOCKS,
                 predictions: str | None = None) -> None:
        self.name, self.linear_warm_start, self.test = name, linear_warm_start, test
        self.predictions = predictions
        self.val_blocks = int(val_blocks)
        self.start_errors: np.ndarray | None = None
        self.test_lookbacks = list(test_lookbacks or [])
        self.start: dict[str, Any] = {}
        self.initial: dict[str, torch.Tensor] | None = None
        self.result: dict[str, Any] | None = None  # after the fit: {"metrics": …, "chosen": …}

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or not self.linear_warm_start:
            return
        dm = trainer.datamodule
        self.start = warm_start(pl_module, dm.data, dm.lookback, dm.horizon)
        xv, yv = dm.data.windows("val", dm.lookback, dm.horizon)
        pred = forecast(pl_module, xv)
        self.start["val_at_start"] = scaled_errors(pred, yv)["mse_scaled"]
        self.start_errors = window_errors(pred, yv)
        self.initial = {k: v.clone() for k, v in pl_module.state_dict().items()}
        pl_module.train()  # forecast() left it in eval mode

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        dm, best = trainer.datamodule, trainer.checkpoint_callback.best_model_path
        state = torch.load(best, map_location="cpu", weights_only=True)
        pl_module.load_state_dict(state["state_dict"])
        xv, yv = dm.data.windows("val", dm.lookback, dm.horizon)
        pred = forecast(pl_module, xv)
        val, start = scaled_errors(pred, yv), dict(self.start)
        if start:  # the warm start stays unless training beat it on val; how the gain spreads is reported
            gain = block_gain(self.start_errors, window_errors(pred, yv), self.val_blocks)
            start["val_gain"] = (f"log MSE ratio {gain.mean:.4f} [{gain.lo:.4f}, {gain.hi:.4f}] "
                                 f"over {gain.n} blocks")
            if start["val_at_start"] <= val["mse_scaled"]:
                pl_module.load_state_dict(self.initial)
                pred = forecast(pl_module, xv)
                val = scaled_errors(pred, yv)
                start["kept"] = "warm start (no epoch beat it on val)"
                self._save_kept(trainer, best)
        if self.predictions:
            save_forecast(self.predictions, "val", pred)
        metrics = {"val/mse_scaled": val["mse_scaled"], **self._test_metrics(pl_module, dm)}
        chosen = {"epochs_run": trainer.current_epoch, "best_epoch": state["epoch"], **start}
        self.result = {"metrics": metrics, "chosen": chosen}
        for logger in trainer.loggers:
            logger.log_metrics(metrics)
            if hasattr(logger, "run_id"):  # MLflow: what was chosen on val, as a tag
                text = "; ".join(f"{k}={v}" for k, v in chosen.items())
                logger.experiment.set_tag(logger.run_id, f"{NAMESPACE}.chosen", text[:5000])
                if self.name:  # the benchmark tags its children too; a run of the layer alone is tagged here
                    logger.experiment.set_tag(logger.run_id, f"{NAMESPACE}.model", self.name)

    @staticmethod
    def _save_kept(trainer: Any, best: str) -> None:
        """Checkpoint the kept warm start beside the best epoch's and make it the run's best
        checkpoint, so the run's checkpoint is the model its metrics are of."""
        kept = str(Path(best).with_name("warm_start.ckpt"))
        trainer.save_checkpoint(kept, weights_only=True)
        trainer.checkpoint_callback.best_model_path = kept

    def _test_metrics(self, model: Any, dm: Any) -> dict[str, float]:
        """The scaled test metrics at the training lookback and at each longer one it is defined at."""
        if not self.test:
            return {}
        x, y = dm.data.windows("test", dm.lookback, dm.horizon)
        pred = forecast(model, x)
        if self.predictions:
            save_forecast(self.predictions, "test", pred)
        test = scaled_errors(pred, y)
        out = {"test/mse_scaled": test["mse_scaled"], "test/mae_scaled": test["mae_scaled"]}
        for n, pred in longer_lookbacks(model, dm.data, tuple(self.test_lookbacks), dm.lookback,
                                        dm.horizon).items():
            if not isinstance(pred, str):  # a string: the model is undefined at that lookback
                out[f"test/mse_scaled_L{n}"] = scaled_errors(pred, y)["mse_scaled"]
        return out


def log_interval(loader: dict[str, Any], default: int = 50) -> int:
    """Lightning's ``log_every_n_steps``: its default, or the steps of one epoch when an epoch is
    shorter (2,048 windows in batches of 128: 16 steps), so every epoch logs its training loss and
    Lightning has nothing to warn about. ``loader``: the datamodule's loader group."""
    if not loader.get("samples_per_epoch"):
        return default
    steps = -(-int(loader["samples_per_epoch"]) // int(loader.get("batch_size", 128)))  # ceil
    return max(1, min(default, steps))


def cli_config(config: dict[str, Any], data: str | Path, lookback: int, horizon: int, *,
               time_col: str = "date", protocol: str | None = None, test: bool = True,
               test_lookbacks: tuple[int, ...] = (), accelerator: str = "cpu",
               predictions: str | Path | None = None, cache_dir: str | Path | None = None) -> dict:
    """A benchmark model config (:func:`~pipelines.studies.ltsf.models.load_model_config`: a CLI layer)
    completed with the protocol's overlay: the windows of ``data`` at ``lookback`` → ``horizon``
    (:class:`LTSFDataModule`), the best val epoch checkpointed before the layer's callbacks,
    :class:`LTSFProtocol` told the model's name, whether to forecast the test windows and the longer
    lookbacks; no Forecaster test pass, model registration or resume checkpoints. ``accelerator``:
    Lightning's (``cpu``, ``gpu``, ``auto``), one device, float32 either way; ``protocol``: the file's
    split rule (``ett`` / ``custom``; ``None``: recognised from the file); ``predictions``: the folder
    the protocol saves the model's forecasts in (``--ensemble``); ``cache_dir``: where the parent
    cached the parsed file (:func:`~datamodules.timeseries.ltsf.load_ltsf`), loaded there, not parsed."""
    layer = config["layer"]
    given = (layer.get("data") or {}).get("init_args") or {}  # grouped by load_model_config
    loader = {"batch_size": 128, "samples_per_epoch": None, **(given.get("loader") or {})}
    windows = {**(given.get("windows") or {}), "lookback": lookback, "horizon": horizon}
    trainer = {"gradient_clip_val": None, **(layer.get("trainer") or {})}
    told = {"name": config["name"], "test": test, "test_lookbacks": list(test_lookbacks),
            "predictions": None if predictions is None else str(predictions)}
    callbacks = [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"monitor": "val/loss", "mode": "min", "save_top_k": 1}}]
    for c in trainer.pop("callbacks", []):
        ours = isinstance(c, dict) and c.get("class_path") == PROTOCOL
        callbacks.append({**c, "init_args": {**(c.get("init_args") or {}), **told}} if ours else c)
    return {
        "model": {"class_path": config["model"]["class_path"],
                  "init_args": {**(config["model"].get("init_args") or {}), "plot_examples": 0}},
        "data": {"class_path": DATAMODULE, "init_args": {
            "source": {"path": str(Path(data).resolve()), "time_col": time_col},
            "split": {"protocol": protocol, "cache_dir": None if cache_dir is None else str(cache_dir)},
            "windows": windows, "loader": loader}},
        "trainer": {**trainer, "accelerator": accelerator, "devices": 1,
                    "log_every_n_steps": log_interval(loader), "num_sanity_val_steps": 0,
                    "enable_model_summary": False, "callbacks": callbacks},
        "test_after_fit": False, "resume": False, "register": {"register": False}, "progress": False,
    }


def child_tags(model: str, horizon: int) -> dict[str, str]:
    """The caller's tags of a child (beside the runner's ``.seed``, ``.key`` and ``.complete``)."""
    return {f"{NAMESPACE}.model": model, f"{NAMESPACE}.horizon": str(horizon)}


def train_child(config: dict[str, Any], horizon: int, seed: int, args: Any, parent: str) -> Any:
    """Train one model config at ``horizon`` and ``seed`` as a nested child of ``parent`` with
    :func:`~pipelines.eval.sweep.train_run` (always trained: ``--resume`` works from results.csv;
    the key is tagged); the :class:`~pipelines.eval.sweep.TrainedRun`."""

    saved = config["name"] in (getattr(args, "ensemble", None) or [])  # a member: its forecasts are kept
    predictions = prediction_dir(args.out, config["name"], horizon, seed) if saved else None
    overlay = cli_config(config, args.data, args.lookback, horizon, time_col=args.time_col,
                         protocol=getattr(args, "protocol", None),
                         test=not args.val_only, test_lookbacks=tuple(args.test_lookbacks),
                         accelerator=args.accelerator, predictions=predictions,
                         cache_dir=getattr(args, "cache_dir", None))
    return train_run([], overlay, seed, experiment=args.experiment,
                     run_name=f"{config['name']}-H{horizon}-seed{seed}", parent_run_id=parent,
                     namespace=NAMESPACE, key=config_key([overlay]), tags=child_tags(config["name"], horizon),
                     reuse=False, log_model=False)
