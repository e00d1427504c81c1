"""Gradient-boosted trees for the LTSF benchmark as practitioners run them (optional: ``.[ltsf]``).

A **direct multi-horizon** LightGBM (the strategy of mlforecast's and skforecast's direct
forecasters, not a recursive one-step model fed its own predictions): one global regressor shared by
every channel (channel-independent, like the other models) takes the lookback's features *and the
horizon step* and predicts that step directly. Fixed before any run, for the CPU budget:

- each window is normalised by its lookback's mean and std, the std at least :data:`MIN_STD` (trees
  do not extrapolate levels: RevIN's idea), the forecast mapped back;
- features: the last :data:`RECENT` values, :data:`BLOCKS` block means of the whole lookback, the
  lookback's mean daily profile at the step's phase (the mean of the values a whole number of days
  of ``data.period`` rows apart), the step and its phase in the day;
- target: the step's value minus that profile value (so the daily shape is kept however far apart
  the modelled steps are);
- modelled steps: at most :data:`ANCHORS` steps spread evenly over the horizon (all of them when
  the horizon is shorter); the residual is interpolated linearly between them and the seasonal
  naive added back at every step — every test window and step is scored;
- fitted on :data:`TRAIN_ROWS` (window, channel, step) rows drawn from the train windows with the
  seed, early-stopped on :data:`VAL_ROWS` rows of the val windows; 2 threads.
"""

from __future__ import annotations

import numpy as np

from datamodules.timeseries.ltsf import LTSFData, scaled_errors
from pipelines.studies.ltsf.models import Result, Timer, _from_channels, channel_rows

RECENT, BLOCKS, ANCHORS = 24, 24, 24
#: the smallest window std a window is divided by (scaled units: a tenth of the channel's train std),
#: so a calm window (a dry spell of a rain channel) whose target moves does not give a huge target
MIN_STD = 0.1
TRAIN_ROWS, VAL_ROWS = 200_000, 50_000
PARAMS = {"n_estimators": 1000, "learning_rate": 0.05, "num_leaves": 63, "min_child_samples": 100,
          "subsample": 0.8, "subsample_freq": 1, "colsample_bytree": 0.8, "verbose": -1}


def anchors(horizon: int) -> np.ndarray:
    """The modelled steps (0-based): every step up to :data:`ANCHORS`, else that many spread evenly
    from the first to the last."""
    if horizon <= ANCHORS:
        return np.arange(horizon)
    return np.unique(np.round(np.linspace(0, horizon - 1, ANCHORS)).astype(int))


def _window_features(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row (n, L) of normalised lookbacks: its features (n, RECENT + BLOCKS), and mean, std (n, 1)."""
    mu, sd = rows.mean(axis=1, keepdims=True), np.maximum(rows.std(axis=1, keepdims=True), MIN_STD)
    z = (rows - mu) / sd
    blocks = np.array_split(z, min(BLOCKS, z.shape[1]), axis=1)
    feats = np.concatenate([z[:, -RECENT:], np.stack([b.mean(axis=1) for b in blocks], axis=1)], axis=1)
    return z, feats, mu, sd


def _seasonal(z: np.ndarray, steps: np.ndarray, period: int) -> np.ndarray:
    """The seasonal profile's value at each step (n, len(steps)): the mean over the lookback's whole
    periods (days) of the value at the step's phase, from normalised lookbacks z (n, L)."""
    length = z.shape[1]
    p = min(period, length)
    m = (length // p) * p  # the lookback's last whole periods
    profile = z[:, length - m:].reshape(len(z), m // p, p).mean(axis=1)  # (n, p)
    return profile[:, (m + steps) % p]


def _design(rows: np.ndarray, steps: np.ndarray, period: int) -> tuple[np.ndarray, ...]:
    """Every (row, step) pair as features (n·S, F), with the seasonal values (n, S), mean and std."""
    z, feats, mu, sd = _window_features(rows)
    seas = _seasonal(z, steps, period)  # (n, S)
    n, s = seas.shape
    x = np.concatenate([np.repeat(feats, s, axis=0), seas.reshape(-1, 1), np.tile(steps, n)[:, None],
                        np.tile((steps % period) / period, n)[:, None]], axis=1)
    return x.astype(np.float32), seas, mu, sd


def _rows(data: LTSFData, split: str, lookback: int, horizon: int, n_rows: int,
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n_rows`` (window, channel, anchor step) training rows of ``split``: features and target."""
    x, y = data.windows(split, lookback, horizon)
    lb, tg = channel_rows(x), channel_rows(y)  # (n·C, L), (n·C, H)
    steps = anchors(horizon)
    pick = rng.choice(len(lb), size=min(len(lb), max(1, n_rows // len(steps))), replace=False)
    feats, seas, mu, sd = _design(lb[pick], steps, data.period)
    target = (tg[pick][:, steps] - mu) / sd - seas  # (m, S): the residual over the daily profile
    return feats, target.reshape(-1).astype(np.float32)


def _forecast(model: object, data: LTSFData, x: np.ndarray, horizon: int, chunk: int = 20_000) -> np.ndarray:
    """The forecast (n, H, C) of lookbacks x (n, L, C): residuals at the anchor steps interpolated
    over the horizon, plus the daily profile, in the data's scaled units."""
    rows, steps, every = channel_rows(x), anchors(horizon), np.arange(horizon)
    out = np.empty((len(rows), horizon))
    for lo in range(0, len(rows), chunk):
        part = rows[lo:lo + chunk]
        feats, _, mu, sd = _design(part, steps, data.period)
        res = model.predict(feats).reshape(len(part), len(steps))  # (m, S)
        full = np.stack([np.interp(every, steps, r) for r in res])  # (m, H)
        z = (part - mu) / sd
        out[lo:lo + chunk] = (full + _seasonal(z, every, data.period)) * sd + mu
    return _from_channels(out, x.shape[2])


def lightgbm_run(data: LTSFData, lookback: int, horizon: int, seed: int, threads: int = 2) -> Result:
    """Fit the direct regressor (early stopping on val rows), forecast every val and test window."""
    import lightgbm as lgb  # optional: lightgbm

    rng = np.random.default_rng(seed)
    with Timer() as clock:
        xt, yt = _rows(data, "train", lookback, horizon, TRAIN_ROWS, rng)
        xv, yv = _rows(data, "val", lookback, horizon, VAL_ROWS, rng)
        model = lgb.LGBMRegressor(**PARAMS, random_state=seed, n_jobs=threads)
        model.fit(xt, yt, eval_X=xv, eval_y=yv, callbacks=[lgb.early_stopping(50, verbose=False)])  # 4.7 API
        val_x, val_y = data.windows("val", lookback, horizon)
        val = scaled_errors(_forecast(model, data, val_x, horizon), val_y)
        pred = _forecast(model, data, data.windows("test", lookback, horizon)[0], horizon)
    params = {"strategy": "direct", "trees": int(model.best_iteration_ or PARAMS["n_estimators"]),
              "anchors": len(anchors(horizon)), "period": data.period}
    return Result(pred, val, params, clock.cpu_s, clock.wall_s)
