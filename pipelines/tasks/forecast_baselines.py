"""Forecasting baselines scored on the model's own test windows: seasonal naive and a linear model."""

from __future__ import annotations

import lightning as L
import numpy as np
from sklearn.linear_model import Ridge

from datamodules.timeseries.parse import estimate_period, gather_windows
from posenc import PosencError


def seasonal_naive(values: np.ndarray, starts: np.ndarray, horizon: int, period: int) -> np.ndarray:
    """Forecast ``values[τ + h]`` by the value one (or more) whole periods earlier that is known at
    τ: ``values[τ + h - period·⌈(h + 1)/period⌉]``. Returns (n, horizon, C)."""
    if period < 1:
        raise PosencError(f"seasonal period must be ≥ 1, got {period}")
    h = np.arange(horizon)
    back = period * ((h + period) // period)  # period·ceil((h+1)/period)
    idx = np.asarray(starts)[:, None] + h[None, :] - back[None, :]  # (n, H)
    if len(idx) and idx.min() < 0:
        raise PosencError(f"seasonal period {period} reaches before the start of the series")
    return values[idx]


class LinearBaseline:
    """Ridge regression from the flattened lookback (L·C) to the flattened horizon (H·C)
    (a DLinear-style direct multi-step linear model), fitted on training windows."""

    def __init__(self, alpha: float = 1.0) -> None:
        self.model = Ridge(alpha=alpha)

    def fit(self, x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> LinearBaseline:
        """x (n, L, C), y (n, H, C); windows with any unobserved target (``mask`` False) are dropped."""
        keep = np.ones(len(x), dtype=bool) if mask is None else mask.reshape(len(mask), -1).all(axis=1)
        if not keep.any():
            raise PosencError("no training window has fully observed targets for the linear baseline")
        self.out_shape = y.shape[1:]
        self.model.fit(x[keep].reshape(keep.sum(), -1), y[keep].reshape(keep.sum(), -1))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.model.predict(x.reshape(len(x), -1)).reshape(len(x), *self.out_shape)


def masked_errors(pred: np.ndarray, truth: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """MSE and MAE over the observed entries (mask True) of (n, H, C) arrays."""
    m = mask.astype(np.float64)
    n = max(m.sum(), 1.0)
    err = pred - truth
    return {"mse": float((err**2 * m).sum() / n), "mae": float((np.abs(err) * m).sum() / n)}


class ForecastBaselines(L.Callback):
    """After testing, score the seasonal-naive and linear baselines on exactly the test windows
    the model was scored on at its training lookback (``Forecaster.scored_starts``; original
    scale, observed targets only) and log ``baseline/seasonal_naive_{mse,mae}``,
    ``baseline/linear_{mse,mae}``, the period used and ``baseline/n_windows``.

    Args:
        season_period: seasonal-naive period in steps; ``None`` → the dominant period of the
            training split's first target (periodogram), at most ``max_period`` steps.
        max_period: longest period considered by the estimate (default: the lookback).
        ridge_alpha: L2 penalty of the linear model.
        max_train_windows: training windows used to fit the linear model (evenly subsampled).
    """

    def __init__(
        self,
        season_period: int | None = None,
        max_period: int | None = None,
        ridge_alpha: float = 1.0,
        max_train_windows: int = 20000,
    ) -> None:
        self.season_period, self.max_period = season_period, max_period
        self.ridge_alpha, self.max_train_windows = ridge_alpha, max_train_windows
        self.results: dict[str, float] = {}

    def period(self, dm) -> int:
        if self.season_period is not None:
            return int(self.season_period)
        train = dm.targets[: dm.n_train, 0]
        return estimate_period(train, min(self.max_period or dm.lookback, len(train) // 2))

    def compute(self, dm, starts: np.ndarray | None = None) -> dict[str, float]:
        """Baseline errors on ``dm``'s test windows starting at ``starts`` (default: all of them);
        usable without a trainer."""
        test = dm.windows("test", starts=starts)
        loc, scale = dm.target_loc, dm.target_scale
        orig = lambda a: a * scale + loc  # noqa: E731 - scaled → original units
        truth = orig(test["y"])
        period = self.period(dm)
        naive = seasonal_naive(dm.targets, test["start"], dm.horizon, period)
        naive_err = masked_errors(orig(naive), truth, test["y_mask"])
        results = {f"seasonal_naive_{k}": v for k, v in naive_err.items()}
        train_starts = dm.starts["train"]
        if len(train_starts) > self.max_train_windows:
            pick = np.linspace(0, len(train_starts) - 1, self.max_train_windows).round().astype(int)
            train_starts = train_starts[pick]
        lin = LinearBaseline(self.ridge_alpha).fit(
            gather_windows(dm.targets, train_starts, dm.lookback, 0),
            gather_windows(dm.targets, train_starts, 0, dm.horizon),
            gather_windows(dm.series.observed, train_starts, 0, dm.horizon),
        )
        linear = masked_errors(orig(lin.predict(test["x"])), truth, test["y_mask"])
        results.update({f"linear_{k}": v for k, v in linear.items()})
        results["season_period"] = float(period)
        results["n_windows"] = float(len(test["start"]))
        return results

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        if not getattr(trainer, "is_global_zero", True):  # DDP: computed and logged once, by rank 0
            return
        if dm is None or not hasattr(dm, "windows"):
            return
        scored = getattr(pl_module, "scored_starts", None)  # the windows the model was scored on
        starts = np.unique(np.asarray(scored, dtype=np.int64)) if scored else None
        self.results = self.compute(dm, starts)
        for logger in trainer.loggers:
            logger.log_metrics({f"baseline/{k}": v for k, v in self.results.items()})
