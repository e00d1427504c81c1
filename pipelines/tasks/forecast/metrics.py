"""Scoring forecasts on the original scale: per horizon step, per lookback, and the forecast figure.

The lookback is the length question for forecasting: a model trained with lookback L is scored on
the *same* test target windows with lookbacks L, 2L, 4L, 8L (the datamodule's ``eval_lookbacks``).
Inside ``trainer.test``, :class:`~pipelines.tasks.forecast.model.Forecaster` accumulates one
:class:`ForecastErrors` per lookback (``None`` where the scheme is undefined at that length, e.g. a
learned table shorter than the lookback) and logs them as every task logs its test lengths
(:func:`~pipelines.tasks.base.log_by_length`); its
:class:`ForecastReport` callback logs the tables and the forecast figure as MLflow artifacts. Without
a trainer, the length sweep (:func:`pipelines.eval.extrapolation.evaluate`, through
:class:`~pipelines.tasks.forecast.module.ForecastAdapter`) scores the same windows at every lookback.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from pipelines.tasks.distributed import gather, sum_tables, union, world_size
from pipelines.tasks.forecast.baselines import ForecastBaselines, seasonal_naive
from pipelines.tracking.store import mlflow_loggers


@dataclass
class ForecastErrors:
    """Sums of squared / absolute errors and counts of observed targets per horizon step."""

    horizon: int
    se: np.ndarray = field(init=False)
    ae: np.ndarray = field(init=False)
    n: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.se, self.ae, self.n = (np.zeros(self.horizon) for _ in range(3))

    def add(self, pred: Tensor, truth: Tensor, mask: Tensor) -> None:
        """Add a batch: ``pred``/``truth`` (B, H, C) on the original scale, ``mask`` (B, H, C)
        True where the target was observed (filled targets are never scored)."""
        m = mask.to(pred.dtype)
        err = pred - truth
        self.se += ((err**2) * m).sum(dim=(0, 2)).double().cpu().numpy()  # (H,)
        self.ae += (err.abs() * m).sum(dim=(0, 2)).double().cpu().numpy()
        self.n += m.sum(dim=(0, 2)).double().cpu().numpy()

    @property
    def mse(self) -> float:
        return float(self.se.sum() / max(self.n.sum(), 1.0))

    @property
    def mae(self) -> float:
        return float(self.ae.sum() / max(self.n.sum(), 1.0))

    def by_horizon(self) -> dict[str, np.ndarray]:
        """Per-step MSE and MAE (H,), NaN where no target was observed."""
        n = np.where(self.n > 0, self.n, np.nan)
        return {"mse": self.se / n, "mae": self.ae / n}


def merge_ranks(errors: dict[int, ForecastErrors | None],
                starts: list[int]) -> tuple[dict[int, ForecastErrors | None], list[int]]:
    """Every DDP rank's test errors summed per lookback (undefined on one rank: undefined) and the
    scored window starts of every rank, in rank order (= loader order: ranks hold contiguous
    blocks). A single process gets its own back."""
    if world_size() == 1:
        return errors, starts
    undefined = union({n for n, e in errors.items() if e is None})
    sums = sum_tables({n: [*e.se, *e.ae, *e.n] for n, e in errors.items() if e is not None})
    merged: dict[int, ForecastErrors | None] = dict.fromkeys(undefined)
    for n, values in sums.items():
        if n not in undefined:
            merged[n] = acc = ForecastErrors(len(values) // 3)
            acc.se, acc.ae, acc.n = np.split(np.asarray(values), 3)
    return merged, [s for part in gather(list(starts)) for s in part]


def to_original(values: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """Scaled (B, T, C) → the data's original units with the batch's training-split scaler."""
    return values * batch["scale"][:, None, :] + batch["loc"][:, None, :]


#: what the forecaster's metric keys measure (logged as the MLflow tag ``metrics/units``)
UNITS = ("test/mse, test/mae, *_original, *_by_horizon, *_by_lookback, *_L<n>, val/mse, val/mae, baseline/*: "
         "the series' own units (squared for MSE); *_scaled: after the training-split scaler (z-scores); "
         "val/loss, train/loss: the training loss on scaled values")


def log_test_metrics(module, errors: ForecastErrors, scaled: ForecastErrors) -> None:
    """The headline test metrics of ``module`` (a Forecaster) at its training lookback: ``test/mse``,
    ``test/mae`` and the same as ``test/{mse,mae}_original`` (the series' units) from ``errors``,
    ``test/{mse,mae}_scaled`` from ``scaled``; per horizon step (``test/mse_by_horizon``, step = h)
    and the :data:`UNITS` tag when an MLflow logger is attached."""

    values = {"test/mse": errors.mse, "test/mae": errors.mae, "test/mse_original": errors.mse,
              "test/mae_original": errors.mae, "test/mse_scaled": scaled.mse, "test/mae_scaled": scaled.mae}
    for name, value in values.items():
        module.log(name, value, sync_dist=True, reduce_fx="max")  # merged: equal on all ranks
    if module.logger is None:
        return
    per_step = errors.by_horizon()
    for h in range(errors.horizon):
        if not np.isnan(per_step["mse"][h]):
            module.logger.log_metrics({"test/mse_by_horizon": float(per_step["mse"][h]),
                                       "test/mae_by_horizon": float(per_step["mae"][h])}, step=h + 1)
    trainer = module.trainer
    for logger in mlflow_loggers(trainer) if trainer.is_global_zero else []:
        logger.experiment.set_tag(logger.run_id, "metrics/units", UNITS)


def lookback_table(results: dict[int, ForecastErrors | None]) -> str:
    """CSV text ``lookback,mse,mae,defined``."""
    rows = ["lookback,mse,mae,defined"]
    for n, err in sorted(results.items()):
        rows.append(f"{n},{err.mse:.6g},{err.mae:.6g},true" if err is not None else f"{n},,,false")
    return "\n".join(rows) + "\n"


def horizon_table(errors: ForecastErrors) -> str:
    """CSV text ``horizon_step,mse,mae``."""
    per = errors.by_horizon()
    lines = ["horizon_step,mse,mae"] + [
        f"{h + 1},{per['mse'][h]:.6g},{per['mae'][h]:.6g}" for h in range(errors.horizon)
    ]
    return "\n".join(lines) + "\n"


def forecast_figure(examples: list[dict], horizon: int, lookback: int, channel: int = 0, ylabel: str = "",
                    period: int | None = None):
    """One panel per example: the end of the lookback, the truth and the forecast of target
    ``channel`` against steps from the forecast start (matplotlib ``Figure``, no pyplot state),
    and the seasonal-naive forecast from the same lookback when ``period`` (steps) fits in it.

    Each example holds ``x`` (L, C), ``y`` (H, C), ``pred`` (H, C), ``mask`` (H, C) and a
    ``title``.
    """
    from matplotlib.figure import Figure  # optional: matplotlib, figures only

    n = len(examples)
    fig = Figure(figsize=(10, 2.3 * n), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    context = min(lookback, 4 * horizon)
    for ax, ex in zip(axes, examples, strict=True):
        ax.plot(np.arange(-context, 0), ex["x"][-context:, channel], color="0.45", lw=1, label="lookback")
        truth = np.where(ex["mask"][:, channel], ex["y"][:, channel], np.nan)
        ax.plot(np.arange(horizon), truth, color="k", lw=1.5, label="truth")
        ax.plot(np.arange(horizon), ex["pred"][:, channel], color="C3", lw=1.5, label="forecast")
        if period is not None and period <= len(ex["x"]):
            naive = seasonal_naive(ex["x"], np.array([len(ex["x"])]), horizon, period)[0]  # (H, C)
            ax.plot(np.arange(horizon), naive[:, channel], color="C0", lw=1, ls="--",
                    label=f"seasonal naive ({period} steps)")
        ax.axvline(0, color="0.7", ls="--", lw=0.8)
        ax.set_title(ex["title"], fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
    axes[0].legend(loc="upper left", fontsize=8, ncol=4)
    axes[-1].set_xlabel(f"steps from forecast start (lookback {lookback}, last {context} shown)")
    return fig


class ForecastReport(Callback):
    """A Forecaster's test artifacts in MLflow: ``horizon_metrics.csv`` and ``lookback_metrics.csv``
    (from the module's accumulated errors) and ``forecast.png``, a figure of ``examples`` test
    forecasts spread evenly over the test windows at the training lookback. Added by
    ``Forecaster.configure_callbacks``; does nothing without an MLflow logger.

    Args:
        examples: test windows drawn in the figure (0: no figure).
    """

    def __init__(self, examples: int = 4) -> None:
        self.examples = examples
        self._wanted: set[int] | None = None
        self._picked: list[dict] = []

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._wanted, self._picked = None, []

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if not outputs or self.examples <= 0 or batch["x"].shape[1] != pl_module.train_lookback():
            return
        if self._wanted is None:
            self._wanted = self._spread_starts(trainer, dataloader_idx)
        x_o = to_original(batch["x"], batch)  # (B, L, C)
        stamps = getattr(getattr(trainer.datamodule, "series", None), "timestamps", None)
        for i, tau in enumerate(batch["start"].tolist()):
            if tau in self._wanted:
                when = f" ({stamps[tau]})" if stamps is not None else ""
                self._picked.append({
                    "start": tau, "title": f"test window: forecast from row {tau}{when}",
                    "x": x_o[i].cpu().numpy(), "y": outputs["truth"][i].cpu().numpy(),
                    "pred": outputs["pred"][i].cpu().numpy(), "mask": batch["y_mask"][i].cpu().numpy(),
                })

    def _spread_starts(self, trainer, dataloader_idx: int) -> set[int]:
        """First target rows of ``examples`` windows evenly spread over what the loader will serve."""
        loaders = trainer.test_dataloaders
        loader = loaders[dataloader_idx] if isinstance(loaders, (list, tuple)) else loaders
        limit = trainer.num_test_batches[dataloader_idx]
        starts = np.asarray(loader.dataset.starts)[: int(min(limit, 1e12)) * loader.batch_size]
        pick = np.linspace(0, len(starts) - 1, min(self.examples, len(starts))).round().astype(int)
        return {int(starts[i]) for i in pick}

    def on_test_end(self, trainer, pl_module) -> None:

        self._picked = [e for part in gather(self._picked) for e in part]  # DDP: every rank's windows
        if not getattr(trainer, "is_global_zero", True):
            return
        errors = pl_module.test_errors
        if not any(e is not None for e in errors.values()):
            return
        main = pl_module.main_lookback()
        loggers = mlflow_loggers(trainer)
        fig = None
        if self._picked and loggers:  # drawn once, logged to every MLflow logger
            names = getattr(getattr(trainer.datamodule, "series", None), "target_cols", None) or [""]
            fig = forecast_figure(sorted(self._picked, key=lambda e: e["start"]), pl_module.horizon, main,
                                  ylabel=str(names[0]), period=naive_period(trainer))
        for logger in loggers:
            client, run_id = logger.experiment, logger.run_id
            client.log_text(run_id, horizon_table(errors[main]), "horizon_metrics.csv")
            client.log_text(run_id, lookback_table(errors), "lookback_metrics.csv")
            if fig is not None:
                client.log_figure(run_id, fig, "forecast.png")


def naive_period(trainer) -> int | None:
    """The seasonal-naive period (steps) of the run's :class:`ForecastBaselines` callback, if it has one."""
    dm = getattr(trainer, "datamodule", None)
    found = next((c for c in trainer.callbacks if isinstance(c, ForecastBaselines)), None)
    if dm is None or found is None:
        return None
    return int(found.results.get("season_period") or found.period(dm))
