"""Time columns: parsing timestamps, merging duplicate timestamps, naming the step (no Lightning/MLflow).

- :func:`parse_time` turns a time column into seconds since its first value: any ISO 8601 text
  (mixed precision such as ``10:00:00.015`` beside ``10:00:01`` included) without a format, any
  other text through ``data.time_format`` (a ``strftime`` format, or ``mixed`` for pandas' per-value
  guess), plain numbers as they are.
- :func:`merge_duplicates` applies ``data.duplicates`` (``error`` / ``first`` / ``last`` / ``mean``)
  to rows sorted by time.
- :func:`format_step` names a step in seconds the way people write frequencies: ``1h``, ``30min``,
  ``10ms``.

Rows are counted from 0 in file order, like pandas; in a CSV, row ``i`` is line ``i + 2``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from posenc import PosencError

DuplicatePolicy = Literal["error", "first", "last", "mean"]
DUPLICATE_POLICIES = ("error", "first", "last", "mean")
# (seconds, suffix), largest first: a step is named in the largest unit it is a whole multiple of.
UNITS = ((86400.0, "d"), (3600.0, "h"), (60.0, "min"), (1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


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
