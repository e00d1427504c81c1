"""The time axis of a series, all of it in one place: timestamps, order, duplicates, step, gaps (no
Lightning/MLflow imports).

:func:`place_in_time` is the time part of :func:`~datamodules.timeseries.parse.parse_series`, one pass:

1. :func:`parse_time` turns a time column into seconds since its first value: any ISO 8601 text
   (mixed precision such as ``10:00:00.015`` beside ``10:00:01`` included) without a format, any
   other text through ``data.time_format`` (a ``strftime`` format, or ``mixed`` for pandas' per-value
   guess), plain numbers as they are; no column: row order.
2. the rows are sorted by time (stable) and ``data.duplicates`` (``error`` / ``first`` / ``last`` /
   ``mean``) is applied to repeated timestamps (:func:`merge_duplicates`);
3. the median step (the series' frequency) is measured, and the gaps and off-grid steps against it
   (:func:`measure_step`); with ``data.fill_gaps`` the skipped rows are inserted (all values missing);
4. the time is expressed in median steps since the first row.

What it found goes into the :class:`SeriesReport`. :func:`format_step` names a step in seconds the
way people write frequencies (``1h``, ``30min``, ``10ms``); :func:`step_minutes` reads a file's step
where the rows are kept in file order (the LTSF protocol).

Rows are counted from 0 in file order, like pandas; in a CSV, row ``i`` is line ``i + 2``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from datamodules.timeseries.config import DUPLICATE_POLICIES, DuplicatePolicy
from posenc import PosencError

TimeKind = Literal["datetime", "numeric", "rows"]
# (seconds, suffix), largest first: a step is named in the largest unit it is a whole multiple of.
UNITS = ((86400.0, "d"), (3600.0, "h"), (60.0, "min"), (1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


@dataclass
class SeriesReport:
    """What parsing found and changed, for the log and for tests."""

    source: str
    n_rows: int = 0  # rows read
    time_kind: TimeKind = "datetime"  # datetimes, plain numbers, or row order (data.time_col: null)
    step: float = 1.0  # median step: seconds for datetimes, column units for numbers, 1 for row order
    time0: float = 0.0  # the first time in the column's units (numeric time; row order: 0)
    step_label: str = "1"  # the step as a frequency: "1h", "30min", "10ms"
    was_sorted: bool = False  # rows were out of time order and have been sorted
    duplicates: int = 0  # rows merged into another row with the same timestamp (data.duplicates)
    duplicate_policy: str = "error"
    n_gaps: int = 0  # steps longer than 1.5 × the median step
    missing_steps: int = 0  # grid steps missing inside those gaps
    first_gap: str | None = None
    off_grid: int = 0  # steps that are not a whole number of median steps
    inserted_rows: int = 0  # rows added by fill_gaps
    missing: dict[str, int] = field(default_factory=dict)  # missing values per column (after gaps)

    @property
    def step_seconds(self) -> float | None:
        """The median step in seconds, or ``None`` when the time is not made of datetimes."""
        return self.step if self.time_kind == "datetime" else None

    @property
    def regular(self) -> bool:
        """At most 1% of the steps are off the grid of whole median steps (gaps are allowed)."""
        return self.off_grid <= 0.01 * max(self.n_rows - self.duplicates - 1, 1)

    def summary(self) -> str:
        """One line: the file, its rows, the step, and whatever parsing changed."""
        if self.time_kind == "rows":
            parts = [f"{self.source}: {self.n_rows} rows, time = row order (data.time_col: null)"]
        else:
            unit = " (numeric time column, in its units)" if self.time_kind == "numeric" else ""
            parts = [f"{self.source}: {self.n_rows} rows, step {self.step_label}{unit} (median)"]
        if self.was_sorted:
            parts.append("rows were not in time order and have been sorted")
        if self.duplicates:
            how = ("merged by their mean" if self.duplicate_policy == "mean"
                   else f"kept the {self.duplicate_policy}")
            parts.append(f"{self.duplicates} row(s) repeating a timestamp: {how} (data.duplicates)")
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


def row_name(i: int, csv: bool) -> str:
    """``row i`` (with its line number in a CSV, whose line 1 is the header)."""
    return f"row {i} (line {i + 2})" if csv else f"row {i}"


def _whole(x: float) -> bool:
    return abs(x - round(x)) <= 1e-6


def format_step(seconds: float) -> str:
    """A step in seconds as a frequency string: ``3600`` → ``1h``, ``1800`` → ``30min``,
    ``0.01`` → ``10ms``, ``5400`` → ``90min``, ``0.015625`` → ``15.625ms``, ``1/3`` → ``333.3ms``.

    The largest unit the step reaches, as a whole number; else a smaller unit giving a whole number
    below 1000; else the largest unit with up to 3 decimals (4 significant digits if not exact)."""
    if not np.isfinite(seconds) or seconds <= 0:
        return f"{seconds:g}s"
    units = [(size, suffix) for size, suffix in UNITS if seconds / size >= 1] or [UNITS[-1]]
    for i, (size, suffix) in enumerate(units):
        count = seconds / size
        if _whole(count) and (i == 0 or count < 1000):
            return f"{round(count)}{suffix}"
    size, suffix = units[0]
    count = seconds / size
    if _whole(count * 1000):
        return f"{count:.3f}".rstrip("0").rstrip(".") + suffix
    return f"{count:.4g}{suffix}"


def _to_datetime(raw: pd.Series, fmt: str) -> pd.Series:
    """``pd.to_datetime`` with unparseable values as NaT; mixed UTC offsets are compared in UTC."""
    try:
        return pd.to_datetime(raw, format=fmt, errors="coerce")
    except (ValueError, TypeError):  # e.g. "Mixed timezones detected"
        return pd.to_datetime(raw, format=fmt, errors="coerce", utc=True)


def _unparseable(raw: pd.Series, ts: pd.Series, col: str, time_format: str | None, source: str,
                 csv: bool) -> PosencError:
    i = int(np.flatnonzero(ts.isna().to_numpy())[0])
    where = f"{source}: unparseable timestamp {raw.iloc[i]!r} in column {col!r} at {row_name(i, csv)}"
    if time_format is None:
        fix = ("is not ISO 8601 (e.g. 2024-01-31 13:00:00); set data.time_format to its strftime format "
               "(e.g. '%d/%m/%Y %H:%M') or to 'mixed' (pandas guesses each value)")
    elif time_format == "mixed":
        fix = "pandas cannot read it as a date; set data.time_format to its strftime format"
    else:
        fix = (f"does not match data.time_format {time_format!r}; fix the format, or unset it "
               f"(null) to read ISO 8601 of any precision")
    return PosencError(f"{where} {fix}")


def parse_time(
    raw: pd.Series, col: str, time_format: str | None, source: str, csv: bool
) -> tuple[np.ndarray, pd.DatetimeIndex | None]:
    """A time column → (float64 seconds since its first value, datetimes) or, for a numeric
    column, (its values, None).

    Args:
        raw: the column as read.
        col: its name (for messages).
        time_format: ``None`` (ISO 8601, any precision per value), ``"mixed"`` (pandas guesses each
            value) or a ``strftime`` format.
        source: the file name used in messages.
        csv: whether rows are lines of a CSV (messages then give the line number too).
    """
    missing = np.flatnonzero(raw.isna().to_numpy())
    if len(missing):
        raise PosencError(f"{source}: timestamp column {col!r} is empty at {row_name(int(missing[0]), csv)}; "
                          f"fill it in or drop the row (or set data.time_col: null to use row order)")
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
        values = raw.to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            raise PosencError(f"{source}: timestamp column {col!r} has a non-finite value at "
                              f"{row_name(int(bad[0]), csv)}")
        return values, None
    ts = _to_datetime(raw, time_format or "ISO8601")
    if ts.isna().any():
        raise _unparseable(raw, ts, col, time_format, source, csv)
    seconds = ((ts - ts.iloc[0]) / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64)
    return seconds, pd.DatetimeIndex(ts)


def _group_mean(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Mean over the rows of each group (groups begin at ``starts``), ignoring NaN; NaN where a
    group has no value. values (N, C) → (G, C)."""
    if values.shape[1] == 0:
        return np.zeros((len(starts), 0))
    seen = ~np.isnan(values)
    sums = np.add.reduceat(np.where(seen, values, 0.0), starts, axis=0)  # (G, C)
    counts = np.add.reduceat(seen.astype(np.int64), starts, axis=0)  # (G, C)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def merge_duplicates(
    t: np.ndarray, order: np.ndarray, arrays: list[np.ndarray], policy: DuplicatePolicy, *,
    describe, col: str, source: str, csv: bool,
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, int]:
    """Apply ``data.duplicates`` to rows sorted by time (stable sort, so equal times keep file order).

    Args:
        t: (N,) sorted times; order: (N,) the file row of each sorted row.
        arrays: (N, ·) arrays aligned with ``t`` (NaN = missing), reduced like the rows.
        policy: ``error`` (one line naming the first duplicated row in file order), ``first`` /
            ``last`` (the row that comes first / last in the file), ``mean`` (per column, over the
            rows holding a value).
        describe: ``describe(i)`` names the timestamp of sorted row ``i`` in messages.

    Returns:
        (times, arrays, sorted row index kept per timestamp (its first row), rows removed).
    """
    if policy not in DUPLICATE_POLICIES:
        raise PosencError(f"data.duplicates must be one of {DUPLICATE_POLICIES}, got {policy!r}")
    is_start = np.r_[True, np.diff(t) != 0]
    starts = np.flatnonzero(is_start)
    if len(starts) == len(t):
        return t, arrays, starts, 0
    if policy == "error":
        repeats = np.flatnonzero(~is_start)  # sorted positions of every repeated row
        p = int(repeats[np.argmin(order[repeats])])  # the earliest of them in the file
        first = int(order[starts[np.searchsorted(starts, p, side="right") - 1]])
        at = row_name(int(order[p]), csv)
        raise PosencError(
            f"{source}: duplicate timestamp {describe(p)} in column {col!r} at {at} "
            f"(first at {row_name(first, csv)}); set data.duplicates to first, last or mean to keep one "
            f"value per timestamp, or data.time_col: null to use row order")
    if policy == "mean":
        merged = [_group_mean(a, starts) for a in arrays]
    else:
        keep = starts if policy == "first" else np.r_[starts[1:], len(t)] - 1
        merged = [a[keep] for a in arrays]
    return t[starts], merged, starts, len(t) - len(starts)


def order_rows(t: np.ndarray, ts: pd.DatetimeIndex | None, arrays: list[np.ndarray], report: SeriesReport,
               col: str | None, csv: bool) -> tuple:
    """Sort rows by time (stable) and apply ``data.duplicates``: (t, ts, arrays)."""
    source = report.source
    order = np.argsort(t, kind="stable")
    report.was_sorted = bool(np.any(np.diff(t) < 0))
    t, arrays = t[order], [a[order] for a in arrays]
    ts = ts[order] if ts is not None else None
    describe = (lambda i: str(ts[i])) if ts is not None else (lambda i: f"{t[i]:g}")
    t, arrays, kept, report.duplicates = merge_duplicates(
        t, order, arrays, report.duplicate_policy, describe=describe, col=str(col), source=source, csv=csv)
    if len(t) < 2:
        raise PosencError(f"{source}: needs at least 2 distinct timestamps in column {col!r}, has {len(t)}")
    return t, (ts[kept] if ts is not None else None), arrays


def measure_step(t: np.ndarray, ts: pd.DatetimeIndex | None, report: SeriesReport) -> None:
    """The median step, its label, and the gaps and off-grid steps measured against it."""
    diffs = np.diff(t)
    step = float(np.median(diffs))
    report.step = step
    labels = {"datetime": format_step(step), "numeric": f"{step:g}", "rows": "1 row"}
    report.step_label = labels[report.time_kind]
    ratio = diffs / step
    k = np.rint(ratio)
    report.off_grid = int((np.abs(ratio - k) > 1e-3).sum())
    gaps = np.flatnonzero(ratio > 1.5)
    report.n_gaps = len(gaps)
    report.missing_steps = int(np.maximum(k[gaps] - 1, 0).sum())
    if len(gaps):
        report.first_gap = str(ts[gaps[0]] if ts is not None else f"{t[gaps[0]]:g}")


def fill_gap_rows(t: np.ndarray, ts: pd.DatetimeIndex | None, arrays: list[np.ndarray],
                  report: SeriesReport) -> tuple:
    """Insert the rows a regular series skips (all values missing): (t, ts, arrays)."""
    if report.off_grid:
        raise PosencError(f"{report.source}: data.fill_gaps needs timestamps on a regular grid, but "
                          f"{report.off_grid} step(s) are not whole multiples of the median step "
                          f"{report.step_label}; set data.fill_gaps: false")
    step = report.step
    grid = np.rint((t - t[0]) / step).astype(np.int64)
    n = int(grid[-1]) + 1
    filled = []
    for a in arrays:
        out = np.full((n, a.shape[1]), np.nan)
        out[grid] = a
        filled.append(out)
    if ts is not None:
        ts = ts[0] + pd.to_timedelta(np.arange(n) * step, unit="s")
    report.inserted_rows = n - len(t)
    return t[0] + np.arange(n) * step, ts, filled


def place_in_time(raw: pd.Series | None, arrays: list[np.ndarray], report: SeriesReport, *,
                  col: str | None, time_format: str | None, fill_gaps: bool,
                  csv: bool) -> tuple[np.ndarray, pd.DatetimeIndex | None, list[np.ndarray]]:
    """The rows in time: parse → sort and merge duplicates → measure the step → fill gaps (see the
    module docstring).

    Args:
        raw: the time column as read (``None``: row order is time).
        arrays: (N, ·) value arrays aligned with the rows (NaN = missing), reduced and extended like them.
        report: filled in with what was found (kind of time, step, order, duplicates, gaps).
        col: the time column's name (for messages).
        time_format: ``None`` (ISO 8601), ``"mixed"`` or a ``strftime`` format.
        fill_gaps: insert the rows a regular series skips.
        csv: whether rows are lines of a CSV (messages then give the line number too).

    Returns:
        (time in median steps since the first row (N',), the datetimes or ``None``, the arrays (N', ·)).
    """
    n = len(arrays[0])
    if raw is None:
        t, ts, report.time_kind = np.arange(n, dtype=np.float64), None, "rows"
    else:
        t, ts = parse_time(raw, col, time_format, report.source, csv)
        report.time_kind = "datetime" if ts is not None else "numeric"
    t, ts, arrays = order_rows(t, ts, arrays, report, col, csv)
    measure_step(t, ts, report)
    report.time0 = float(t[0]) if ts is None else 0.0
    if fill_gaps and report.n_gaps:
        t, ts, arrays = fill_gap_rows(t, ts, arrays, report)
    return (t - t[0]) / report.step, (pd.DatetimeIndex(ts) if ts is not None else None), arrays


def step_minutes(times: pd.Series) -> float | None:
    """The median step of a time column in minutes, rows in file order; ``None`` when it does not hold
    datetimes (more than 1% unreadable)."""
    parsed = pd.to_datetime(times, errors="coerce")
    if parsed.isna().mean() > 0.01 or len(parsed) < 2:
        return None
    return float(pd.Series(parsed).diff().median().total_seconds() / 60.0)
