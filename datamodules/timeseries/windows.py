"""Time-series split, scaling, window arithmetic and period estimates (no Lightning/MLflow imports).

Used after :mod:`datamodules.timeseries.parse` has read and cleaned a series:

- :func:`split_points` cuts the rows chronologically into train / val / test;
  :func:`fit_scaler` fits a scikit-learn ``StandardScaler`` on the training rows only.
- :func:`window_starts` is the window arithmetic: a window is identified by the index τ of its
  first target; its targets are rows ``[τ, τ + horizon)`` and its lookback rows
  ``[τ - lookback, τ)``. Targets always lie inside one split; the lookback may reach back into
  earlier splits (the past is known at forecast time) unless ``context_from`` says otherwise.
- :class:`ForecastWindows` serves windows as tensors.
- :func:`estimate_periods`: dominant seasonal periods in whole steps.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler
from torch.utils.data import Dataset

from posenc import PosencError, periods_from_data

PositionMode = Literal["index", "time"]


# --------------------------------------------------------------------------------------- split/scale
def split_points(n: int, fractions: tuple[float, float, float] | list[float]) -> tuple[int, int]:
    """Chronological split: rows ``[0, a)`` train, ``[a, b)`` val, ``[b, n)`` test."""
    fr = tuple(float(f) for f in fractions)
    if len(fr) != 3 or any(f < 0 for f in fr) or abs(sum(fr) - 1) > 1e-6 or fr[0] == 0 or fr[2] == 0:
        raise PosencError(
            f"data.split must be three fractions (train, val, test) summing to 1 with train and test > 0, "
            f"got {list(fractions)}"
        )
    a = int(round(fr[0] * n))
    b = int(round((fr[0] + fr[1]) * n))
    return a, b


def fit_scaler(values: np.ndarray, observed: np.ndarray, n_train: int, names: list[str]) -> StandardScaler:
    """A ``StandardScaler`` fitted on the observed values of the first ``n_train`` rows only
    (filled values and everything after the training split never reach it)."""
    train = values[:n_train].astype(np.float64, copy=True)
    train[~observed[:n_train]] = np.nan
    for j, name in enumerate(names):
        if np.isnan(train[:, j]).all():
            raise PosencError(f"column {name!r} has no observed values in the training split (its first "
                              f"{n_train} rows); change data.split or leave the column out")
    scaler = StandardScaler()
    if train.shape[1]:
        scaler.fit(train)  # sklearn ignores NaN when fitting
    return scaler


def apply_scaler(scaler: StandardScaler, values: np.ndarray) -> np.ndarray:
    """Scale ``values`` (N, C) as float32; NaN (the ``mask`` policy) becomes 0, the training mean."""
    if values.shape[1] == 0:
        return values.astype(np.float32)
    out = (values - scaler.mean_) / scaler.scale_
    return to_float32(np.nan_to_num(out, nan=0.0))


def to_float32(values: np.ndarray) -> np.ndarray:
    """``values`` as float32; an overflow becomes inf without numpy's warning (:func:`check_scaled`
    then names its row and column)."""
    with np.errstate(over="ignore"):
        return values.astype(np.float32)


# --------------------------------------------------------------------------------------- windows
def check_scaled(values: np.ndarray, names: list[str], series: Any) -> np.ndarray:
    """``values`` (N, C), scaled float32 columns ``names`` of ``series`` as the model sees them, or a
    one-line error naming the first row and column that is not finite (a value far outside the
    training rows' spread overflows float32 once divided by their standard deviation)."""
    bad = np.argwhere(~np.isfinite(values))  # (n_bad, 2) row, column
    if len(bad):
        i, j = (int(v) for v in bad[0])
        raise PosencError(f"{series.report.source}: column {names[j]!r} at {series.row_label(i)} is not "
                          f"finite after scaling by the training rows' mean and standard deviation into "
                          f"float32; check that value (its units, a typo)")
    return values


def window_starts(
    split: tuple[int, int], lookback: int, horizon: int, stride: int = 1, *, context_from: int = 0
) -> np.ndarray:
    """The window arithmetic: indices τ of the first target of every window of a split.

    A window's targets are rows ``[τ, τ + horizon)`` and must lie inside ``split = (lo, hi)``; its
    lookback, rows ``[τ - lookback, τ)``, must start at or after ``context_from`` (0: lookback may
    use earlier splits; ``lo``: lookback inside the split too). Windows go every ``stride`` rows
    from the first valid τ.

    Returns:
        int64 array of τ (empty when the split holds no window).
    """
    lo, hi = split
    if lookback < 1 or horizon < 1 or stride < 1:
        raise PosencError(f"lookback, horizon and stride must be ≥ 1, got {lookback}, {horizon}, {stride}")
    first = max(lo, context_from + lookback)
    last = hi - horizon
    if last < first:
        return np.zeros(0, dtype=np.int64)
    return np.arange(first, last + 1, stride, dtype=np.int64)


def gather_windows(values: np.ndarray, starts: np.ndarray, before: int, after: int) -> np.ndarray:
    """Rows ``[τ - before, τ + after)`` of ``values`` (N, C) for every τ: (n, before + after, C)."""
    idx = starts[:, None] + np.arange(-before, after)[None, :]
    return values[idx]


class ForecastWindows(Dataset):
    """Windows ``(lookback → horizon)`` at the target starts ``starts``, as dicts of tensors.

    Items:
        x: (L, C) scaled targets of the lookback; cov: (L, K) scaled covariates (+ calendar);
        fut: (H, F) the known-future inputs over the horizon: the covariate columns
        ``future_index`` (calendar features, columns known in advance) at the target rows;
        pos: (L,) positions — int64 step index 0..L-1 (``index``) or float32 time since the
        window's first step in units of the median step (``time``);
        y: (H, C) scaled targets; y_mask: (H, C) bool, observed targets (scored);
        loss_mask: (H, C) bool, targets trained on (all of them with ``train_on_filled``);
        loc, scale: (C,) the target scaler, so outputs can be mapped back to the original scale;
        start: τ.

    ``window_blocks`` (None, or int64 aligned with ``starts``): the bootstrap block of each window,
    set by the datamodule where ``windows.time_block`` asks for blocks.
    """

    window_blocks: np.ndarray | None = None

    def __init__(
        self,
        targets: np.ndarray,
        observed: np.ndarray,
        covariates: np.ndarray,
        time: np.ndarray,
        starts: np.ndarray,
        lookback: int,
        horizon: int,
        positions: PositionMode = "index",
        loss_on_filled: bool = False,
        loc: np.ndarray | None = None,
        scale: np.ndarray | None = None,
        future_index: list[int] | None = None,
    ) -> None:
        if positions not in ("index", "time"):
            raise PosencError(f"data.positions must be 'index' or 'time', got {positions!r}")
        if len(starts) and (starts.min() < lookback or starts.max() + horizon > len(targets)):
            raise PosencError("window starts fall outside the series")
        self.targets = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.float32))
        self.observed = torch.from_numpy(np.ascontiguousarray(observed, dtype=bool))
        self.covariates = torch.from_numpy(np.ascontiguousarray(covariates, dtype=np.float32))
        self.time = torch.from_numpy(np.ascontiguousarray(time, dtype=np.float64))
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lookback, self.horizon, self.positions = lookback, horizon, positions
        self.loss_on_filled = loss_on_filled
        c = targets.shape[1]
        self.loc = torch.as_tensor(np.zeros(c) if loc is None else loc, dtype=torch.float32)
        self.scale = torch.as_tensor(np.ones(c) if scale is None else scale, dtype=torch.float32)
        self._index_pos = torch.arange(lookback)
        self.future_index = torch.as_tensor(list(future_index or []), dtype=torch.long)  # (F,)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        tau = int(self.starts[i])
        a, b = tau - self.lookback, tau + self.horizon
        y_mask = self.observed[tau:b]
        if self.positions == "index":
            pos = self._index_pos
        else:
            pos = (self.time[a:tau] - self.time[a]).float()
        return {
            "x": self.targets[a:tau],
            "cov": self.covariates[a:tau],
            "fut": self.covariates[tau:b, self.future_index],  # (H, F)
            "pos": pos,
            "y": self.targets[tau:b],
            "y_mask": y_mask,
            "loss_mask": torch.ones_like(y_mask) if self.loss_on_filled else y_mask,
            "loc": self.loc,
            "scale": self.scale,
            "start": torch.tensor(tau),
        }


def min_series_length(lookback: int, horizon: int) -> int:
    return lookback + horizon


def check_length(n: int, lookback: int, horizon: int, source: str) -> None:
    """A series must hold at least one window."""
    need = min_series_length(lookback, horizon)
    if n < need:
        raise PosencError(f"{source}: the series has {n} rows, shorter than one window of "
                          f"lookback + horizon = {lookback} + {horizon} = {need} rows")


def estimate_periods(values: np.ndarray, max_period: int, min_period: int = 2, top_k: int = 1) -> list[int]:
    """The ``top_k`` dominant periods (whole steps, strongest first) of a 1-D series within
    ``[min_period, max_period]``.

    NaNs are replaced by the mean and the linear trend removed; the peaks themselves come from
    :func:`posenc.periods_from_data` (windowed, zero-padded periodogram with peak refinement).
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    x = np.where(np.isnan(x), np.nanmean(x), x)
    n = len(x)
    if n < max(8, 2 * min_period):
        raise PosencError(f"cannot estimate a period from {n} values")
    x = x - np.polyval(np.polyfit(np.arange(n), x, 1), np.arange(n))  # remove the linear trend
    top = periods_from_data(x, max_period=min(float(max_period), n / 2), min_period=float(min_period),
                            top_k=top_k)
    if not top:
        raise PosencError(f"no period in [{min_period}, {max_period}] is resolvable from {n} values")
    out: list[int] = []
    for p in top:  # whole steps; two peaks rounding to the same step count once
        whole = max(min_period, int(math.floor(p + 0.5)))
        if whole not in out:
            out.append(whole)
    return out


def estimate_period(values: np.ndarray, max_period: int, min_period: int = 2) -> int:
    """The dominant period (whole steps) of a 1-D series, see :func:`estimate_periods`."""
    return estimate_periods(values, max_period, min_period, top_k=1)[0]
