"""Calendar knowledge of a series: cyclic calendar features and the seasonal cycles its step implies
(no Lightning/MLflow imports).

- :func:`calendar_features`: sin/cos of the hour of day and the day of week, as model inputs;
  :func:`auto_calendar` picks the ones that vary at the series' step (``data.calendar: auto``).
- :func:`calendar_cycles`: the daily / weekly / yearly cycles in whole steps of the series' median
  step (24 for hourly data, 48 half-hourly, 7 daily, 52 weekly, 12 monthly).
- :func:`season_period`: the seasonal-naive period in steps: the shortest calendar cycle longer than
  the step (so the daily cycle for sub-daily data, the weekly one for daily data) when the timestamps
  are regular datetimes of at least a second; otherwise (row order, numeric or irregular time,
  sub-second steps) the strongest periodogram peak of the training split.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from datamodules.timeseries.windows import estimate_period
from posenc import PosencError

CalendarFeature = Literal["hour", "dayofweek"]
CALENDAR_FEATURES = ("hour", "dayofweek")
TimeKind = Literal["datetime", "numeric", "rows"]
DAY = 86400.0
CYCLES = (("daily", DAY), ("weekly", 7 * DAY), ("yearly", 365.2425 * DAY))
CYCLE_TOLERANCE = 0.05  # a cycle counts when it is within 5% of a whole number of steps


def auto_calendar(step_seconds: float | None) -> list[str]:
    """``data.calendar: auto``: the calendar features that vary at the series' step: hour of day and
    day of week below a daily step, day of week below a weekly one, none without datetimes."""
    if step_seconds is None:
        return []
    return [f for f, longest in (("hour", DAY), ("dayofweek", 7 * DAY)) if step_seconds < longest]


def calendar_cycles(step_seconds: float) -> list[tuple[str, int]]:
    """The calendar cycles longer than a step of ``step_seconds``, as (name, whole steps), shortest
    first: hourly data → daily 24, weekly 168, yearly 8766. A cycle that is not within 5% of a whole
    number of steps (a week of 2-day steps) is left out; sub-second steps have none."""
    if not step_seconds >= 1.0:
        return []
    out = []
    for name, seconds in CYCLES:
        ratio = seconds / step_seconds
        steps = int(round(ratio))
        if steps >= 2 and abs(ratio - steps) <= CYCLE_TOLERANCE * ratio:
            out.append((name, steps))
    return out


def season_period(report, train: np.ndarray, max_period: int) -> tuple[int, str]:
    """The seasonal-naive period in steps and how it was chosen (see the module docstring).

    Args:
        report: the series' :class:`~datamodules.timeseries.parse.SeriesReport` (kind of time,
            median step, regularity).
        train: (n,) the first target over the training rows only (no test leakage).
        max_period: longest period the periodogram may pick (e.g. the lookback).

    Returns:
        (period, reason): a calendar cycle (``"daily cycle of 1h data"``), a periodogram peak, or
        1 (the last value) when the training split shows no resolvable peak.
    """
    n, label = len(train), report.step_label
    if report.time_kind == "rows":
        why = "time is row order (data.time_col: null)"
    elif report.time_kind == "numeric":
        why = "numeric time column, no calendar"
    elif not report.regular:
        why = f"irregular timestamps ({report.off_grid} steps off the {label} grid)"
    elif not report.step >= 1.0:
        why = f"sub-second step {label}, no calendar cycle"
    else:
        cycles = calendar_cycles(report.step)
        for name, period in cycles:
            if period <= n // 2:
                return period, f"{name} cycle of {label} data"
        why = (f"the {cycles[0][0]} cycle ({cycles[0][1]} steps) does not fit twice in {n} training rows"
               if cycles else f"no calendar cycle is a whole number of {label} steps")
    try:
        peak = estimate_period(train, max(2, min(int(max_period), n // 2)))
    except PosencError:
        return 1, f"last value, no periodogram peak in the training split; {why}"
    return peak, f"periodogram peak ≤ {max_period} steps of the training split; {why}"


def calendar_features(
    timestamps: pd.DatetimeIndex | None, features: list[str], timezone: str | None = None, *,
    n_rows: int = 0, time_kind: TimeKind = "numeric",
) -> np.ndarray:
    """Cyclic calendar covariates (N, 2·len(features)): sin/cos of the hour of day (period 24 h)
    and of the day of week (period 7 days, with the hour as its fractional part).

    Args:
        timestamps: the series' datetimes (``None`` when the time is numeric or row order).
        features: a subset of ``("hour", "dayofweek")``.
        timezone: IANA zone the calendar is read in; tz-aware timestamps are converted to it,
            naive timestamps are taken as already local.
        n_rows: rows of the (N, 0) result when there are no features and no timestamps.
        time_kind: what the time is when there are no timestamps (named in the error).
    """
    features = list(features)
    for f in features:
        if f not in CALENDAR_FEATURES:
            raise PosencError(f"data.calendar entries must be in {CALENDAR_FEATURES}, got {f!r}")
    if not features:
        return np.zeros((n_rows if timestamps is None else len(timestamps), 0))
    if timestamps is None:
        why = ("data.time_col is null (row order is time)" if time_kind == "rows"
               else "the time column is numeric")
        raise PosencError(f"data.calendar needs datetime timestamps for {features}, but {why}; "
                          f"set data.calendar: [] (or auto)")
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
