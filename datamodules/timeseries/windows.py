"""Time-series split, scaling and window arithmetic (no Lightning/MLflow imports).

Used after :mod:`datamodules.timeseries.parse` has read and cleaned a series:

- :func:`layout_windows` places every window of a series at once: :func:`split_points` cuts the rows
  chronologically into train / val / test, :func:`window_starts` is the window arithmetic (a window
  is identified by the index τ of its first target; its targets are rows ``[τ, τ + horizon)`` and
  its lookback rows ``[τ - lookback, τ)``; targets always lie inside one split, the lookback may reach
  back into earlier splits, the past being known at forecast time, unless ``context_from`` says
  otherwise), and the test lookbacks are chosen.
- :func:`scale_series` scales targets and covariates with scikit-learn ``StandardScaler`` s fitted
  on the training rows only (:func:`fit_scaler`).
- :class:`ForecastWindows` serves windows as tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler
from torch.utils.data import Dataset

from datamodules.timeseries.config import PositionMode, Windows
from posenc import PosencError


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


# --------------------------------------------------------------------------------------- a series' layout
@dataclass
class Layout:
    """Where a series' windows are: the split rows, the first-target rows τ of every window per split,
    and the test lookbacks (all test lookbacks score the same target windows)."""

    n_train: int
    n_trainval: int
    bounds: dict[str, tuple[int, int]]
    starts: dict[str, np.ndarray]
    eval_lookbacks: list[int]
    note: str = ""  # why some default test lookbacks were left out (logged by the datamodule)


def layout_windows(n: int, w: Windows, source: str) -> Layout:
    """Split ``n`` rows by ``w.split`` and place every window of each split; test windows leave room
    for the longest test lookback (default L, 2L, 4L, 8L where the test split has room for them).

    Raises:
        PosencError: the series is shorter than a window, or a split (val may be empty) holds none.
    """
    check_length(n, w.lookback, w.horizon, source)
    n_train, n_trainval = split_points(n, w.split)
    bounds = {"train": (0, n_train), "val": (n_train, n_trainval), "test": (n_trainval, n)}
    ctx = {name: 0 if w.context_from_previous else lo for name, (lo, _) in bounds.items()}
    lookbacks, note = sorted({w.lookback, *(w.eval_lookbacks or [])}), ""
    if not w.eval_lookbacks:
        wanted = [k * w.lookback for k in (1, 2, 4, 8)]
        lookbacks = [m for m in wanted if m == w.lookback or len(
            window_starts(bounds["test"], m, w.horizon, context_from=ctx["test"]))]
        if len(lookbacks) < len(wanted):
            note = (f"{source}: test lookbacks {lookbacks} (no room before the test split for "
                    f"{sorted(set(wanted) - set(lookbacks))}; set data.init_args.windows.eval_lookbacks)")
    starts: dict[str, np.ndarray] = {}
    for name, (lo, hi) in bounds.items():
        need = w.lookback if name != "test" else max(lookbacks)
        step = w.stride if name == "train" else w.eval_stride
        starts[name] = window_starts((lo, hi), need, w.horizon, step, context_from=ctx[name])
        if len(starts[name]) == 0 and (name != "val" or hi > lo):
            raise PosencError(
                f"{source}: the {name} split (rows {lo}..{hi - 1}) holds no window of lookback {need} "
                f"+ horizon {w.horizon}; use a longer series, other data.init_args.windows.split "
                f"fractions or shorter lookbacks (data.init_args.windows.lookback / "
                f"data.init_args.windows.eval_lookbacks)")
    return Layout(n_train, n_trainval, bounds, starts, lookbacks, note)


def scale_series(series: Any, n_train: int) -> tuple[StandardScaler, np.ndarray, np.ndarray]:
    """The targets' scaler and the scaled targets (N, C) and covariates (N, K), float32, each scaler
    fitted on the observed values of the first ``n_train`` rows only (``series``: a
    :class:`~datamodules.timeseries.parse.Series`)."""
    s = series
    target_scaler = fit_scaler(s.targets, s.observed, n_train, s.target_cols)
    cov_scaler = fit_scaler(s.covariates, s.cov_observed, n_train, s.covariate_cols)
    targets = check_scaled(apply_scaler(target_scaler, s.targets), s.target_cols, s)  # (N, C)
    covariates = check_scaled(apply_scaler(cov_scaler, s.covariates), s.covariate_cols, s)  # (N, K)
    return target_scaler, targets, covariates
