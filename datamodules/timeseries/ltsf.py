"""The long-horizon forecasting (LTSF) protocol of the ETT benchmark, as the literature runs it.

Informer / Autoformer / PatchTST / DLinear split ETTh1 by row: train ``[0, 8640)`` (12 months of
hours), val ``[8640, 11520)`` and test ``[11520, 14400)`` (4 months each); rows past 14,400 are
unused. Val and test windows may start their lookback in the previous split (the first target of a
val window is row 8640 at the earliest). Every column is standard-scaled with the mean and std of
the train rows only, all columns go in and all come out, and MSE / MAE are averaged over every
channel, horizon step and test window of the *scaled* data (every window counts: for lookback 336
and horizon 96 that is 2,785 test windows).

This module is that protocol and nothing else (no Lightning or MLflow): :func:`read_ltsf` reads a
file with the project's CSV parsing, :func:`split_windows` gives a split's windows and
:func:`scaled_errors` the metrics.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.preprocessing import StandardScaler

from datamodules.timeseries.parse import Series, parse_series, read_table
from datamodules.timeseries.windows import apply_scaler, fit_scaler, gather_windows, window_starts
from posenc import PosencError

#: The hourly ETT row borders: train [0, 8640), val [8640, 11520), test [11520, 14400).
ETT_HOURLY_BORDERS = (8640, 11520, 14400)
SPLITS = ("train", "val", "test")
#: the largest share of a target column that may be missing in the protocol's rows (all in train)
MAX_MISSING = 0.10


def split_bounds(n_rows: int, borders: tuple[int, int, int] = ETT_HOURLY_BORDERS,
                 source: str = "<data>") -> dict[str, tuple[int, int]]:
    """``{split: (first row, end row)}`` for a series of ``n_rows`` rows; an error naming the file
    when it is shorter than the protocol's last border."""
    a, b, c = borders
    if not 0 < a < b < c:
        raise PosencError(f"split borders must be increasing and positive, got {list(borders)}")
    if n_rows < c:
        raise PosencError(f"{source}: the protocol needs at least {c} rows (train [0, {a}), val [{a}, {b}), "
                          f"test [{b}, {c})), the file has {n_rows}")
    return {"train": (0, a), "val": (a, b), "test": (b, c)}


def n_windows(bounds: tuple[int, int], lookback: int, horizon: int) -> int:
    """Windows in a split ``(lo, hi)`` whose lookback may reach back before ``lo`` (not before row 0):
    ``hi − horizon − max(lo, lookback) + 1`` (0 when negative); e.g. 2,785 for the ETTh1 test split
    at lookback 336 and horizon 96 (= 2880 − 96 + 1)."""
    lo, hi = bounds
    return max(0, hi - horizon - max(lo, lookback) + 1)


@dataclass
class LTSFData:
    """A series under the protocol: ``values`` (N, C) scaled with the train rows' scaler, ``bounds``
    per split, the column names, the fitted ``scaler`` and the file's name (for messages)."""

    values: np.ndarray
    bounds: dict[str, tuple[int, int]]
    columns: list[str]
    scaler: StandardScaler
    source: str

    @property
    def n_channels(self) -> int:
        return self.values.shape[1]

    def starts(self, split: str, lookback: int, horizon: int) -> np.ndarray:
        """First-target rows τ of every window of ``split`` (lookback rows ``[τ − L, τ)``, targets
        ``[τ, τ + H)`` inside the split)."""
        if split not in self.bounds:
            raise PosencError(f"unknown split {split!r}; one of {', '.join(SPLITS)}")
        return window_starts(self.bounds[split], lookback, horizon, context_from=0)

    def windows(self, split: str, lookback: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """Every window of ``split``: lookbacks x (n, L, C) and targets y (n, H, C), scaled."""
        starts = self.starts(split, lookback, horizon)
        if len(starts) == 0:
            raise PosencError(f"{self.source}: the {split} split {self.bounds[split]} holds no window of "
                              f"lookback {lookback} + horizon {horizon}")
        return (gather_windows(self.values, starts, lookback, 0),  # (n, L, C)
                gather_windows(self.values, starts, 0, horizon))  # (n, H, C)


def scale_protocol(raw: np.ndarray, columns: list[str], borders: tuple[int, int, int] = ETT_HOURLY_BORDERS,
                   source: str = "<data>") -> LTSFData:
    """Cut ``raw`` (N, C) to the protocol's rows and scale it with a scaler fitted on the train rows
    only (no val/test value reaches the scaler)."""
    bounds = split_bounds(len(raw), borders, source)
    raw = np.asarray(raw, dtype=np.float64)[: borders[2]]  # rows past the test split are unused
    observed = ~np.isnan(raw)
    scaler = fit_scaler(raw, observed, bounds["train"][1], columns)
    return LTSFData(apply_scaler(scaler, raw), bounds, list(columns), scaler, source)


def read_ltsf(path: str | Path, time_col: str = "date", target_cols: list[str] | None = None,
              borders: tuple[int, int, int] = ETT_HOURLY_BORDERS) -> LTSFData:
    """Read a CSV/parquet file (e.g. ETTh1.csv) with the project's parser and apply the protocol:
    every column but ``time_col`` is a channel unless ``target_cols`` names them."""
    file = Path(path)
    if not file.is_file():
        raise PosencError(f"{file}: no such file (pass the path of ETTh1.csv or your own file)")
    table = read_table(file)
    if time_col not in table.columns:
        names = ", ".join(map(str, table.columns))
        raise PosencError(f"{file.name}: no time column {time_col!r}; columns are {names}")
    columns = list(target_cols or [c for c in table.columns if c != time_col])
    series = parse_series(table, time_col, columns, source=file.name)
    if not series.report.regular:
        raise PosencError(f"{file.name}: the protocol needs a regular series (rows not evenly spaced)")
    check_filled(series, borders, file.name)
    return scale_protocol(series.targets, columns, borders, file.name)


def check_filled(series: Series, borders: tuple[int, int, int], source: str) -> int:
    """Nothing fabricated is scored: a target column more than :data:`MAX_MISSING` empty in the
    protocol's rows is refused, and so is any missing value in the scored (val and test) rows; missing
    train values are filled (linear in time), counted on stderr, trained on and never scored.

    Returns:
        How many train values were filled.

    Raises:
        PosencError: the column (and, in a scored split, the row and time), in one line.
    """
    end = min(borders[2], len(series))
    missing = ~series.observed[:end]
    for j, col in enumerate(series.target_cols):
        share = missing[:, j].mean() if end else 0.0
        if share > MAX_MISSING:
            raise PosencError(f"{source}: column {col!r} is {share:.0%} empty ({int(missing[:, j].sum())} of "
                              f"{end} protocol rows): the benchmark refuses a target more than "
                              f"{MAX_MISSING:.0%} missing (it would score forecasts against filled values)")
        scored = np.flatnonzero(missing[borders[0]:end, j])
        if len(scored):
            row = borders[0] + int(scored[0])
            split = "val" if row < borders[1] else "test"
            raise PosencError(f"{source}: column {col!r} has no value at {series.row_label(row)}, in the "
                              f"{split} split: the benchmark scores only values in the file; fill it "
                              "yourself or leave the column out")
    filled = int(missing.sum())
    if filled:
        counts = ", ".join(f"{c}={int(missing[:, j].sum())}" for j, c in enumerate(series.target_cols)
                           if missing[:, j].any())
        print(f"note: {source}: {filled} missing train value(s) filled by linear interpolation ({counts}); "
              "trained on, never scored", file=sys.stderr)
    return filled


def scaled_errors(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """``mse_scaled`` and ``mae_scaled``: the mean over every window, step and channel of the squared
    / absolute error of (n, H, C) arrays on the scaled data (the literature's metrics)."""
    if pred.shape != truth.shape:
        raise PosencError(f"forecast shape {pred.shape} differs from the targets' {truth.shape}")
    err = pred.astype(np.float64) - truth.astype(np.float64)
    return {"mse_scaled": float(np.mean(err**2)), "mae_scaled": float(np.mean(np.abs(err)))}
