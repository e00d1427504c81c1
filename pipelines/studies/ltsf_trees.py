"""Gradient-boosted trees on lag features for the LTSF benchmark (optional: ``pip install .[ltsf]``).

One LightGBM regressor shared by every channel (a global model, channel-independent like the
others) predicts the next step from lags of the window normalised by its own lookback's mean and
std (trees do not extrapolate levels; RevIN's idea), and forecasts the horizon recursively, feeding
its predictions back as lags. Trained on every train step, early-stopped on the val steps' one-step
error; scored on every test window.
"""

from __future__ import annotations

import numpy as np

from datamodules.timeseries.ltsf import LTSFData, scaled_errors
from pipelines.studies.ltsf_models import Result, Timer, _from_channels, _per_channel

#: lags (steps back) used as features: the last day hour by hour, then daily up to a week, and two weeks
LAGS = (*range(1, 25), 48, 72, 96, 120, 144, 168, 336)


def _stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lookback mean and std (n, 1) of rows x (n, L)."""
    return x.mean(axis=1, keepdims=True), x.std(axis=1, keepdims=True) + 1e-5


def _features(buf: np.ndarray) -> np.ndarray:
    """Lag features (n, len(LAGS)) from normalised buffers (n, T): ``buf[:, -lag]``."""
    return buf[:, [-lag for lag in LAGS]]


def _one_step_rows(data: LTSFData, split: str, lookback: int) -> tuple[np.ndarray, np.ndarray]:
    """Every step of ``split`` as (features, normalised next value), one row per step and channel."""
    x, y = data.windows(split, lookback, 1)  # (n, L, C), (n, 1, C)
    rows, target = _per_channel(x), _per_channel(y)[:, 0]  # (n·C, L), (n·C,)
    mu, sd = _stats(rows)
    return _features((rows - mu) / sd), (target - mu[:, 0]) / sd[:, 0]


def _recursive(model: object, x: np.ndarray, horizon: int) -> np.ndarray:
    """Forecast (n, H, C) from lookbacks x (n, L, C), one step at a time."""
    c = x.shape[2]
    rows = _per_channel(x)  # (n·C, L)
    mu, sd = _stats(rows)
    buf = (rows - mu) / sd
    out = np.empty((len(rows), horizon))
    for h in range(horizon):
        step = model.predict(_features(buf))  # (n·C,)
        out[:, h] = step
        buf = np.concatenate([buf[:, 1:], step[:, None]], axis=1)
    return _from_channels(out * sd + mu, c)


def lightgbm_run(data: LTSFData, lookback: int, horizon: int, seed: int, threads: int = 2) -> Result:
    """Fit the regressor (early stopping on val one-step rows), forecast val and test recursively."""
    import lightgbm as lgb

    with Timer() as clock:
        xt, yt = _one_step_rows(data, "train", lookback)
        xv, yv = _one_step_rows(data, "val", lookback)
        model = lgb.LGBMRegressor(n_estimators=1000, learning_rate=0.05, num_leaves=31, min_child_samples=50,
                                  subsample=0.8, subsample_freq=1, colsample_bytree=0.8, random_state=seed,
                                  n_jobs=threads, verbose=-1)
        model.fit(xt, yt, eval_X=xv, eval_y=yv, callbacks=[lgb.early_stopping(50, verbose=False)])  # 4.7 API
        val_x, val_y = data.windows("val", lookback, horizon)
        val = scaled_errors(_recursive(model, val_x, horizon), val_y)
        pred = _recursive(model, data.windows("test", lookback, horizon)[0], horizon)
    return Result(pred, val, {"trees": int(model.best_iteration_ or model.n_estimators)},
                  clock.cpu_s, clock.wall_s)
