"""Calendar knowledge of a series: cyclic calendar features and the seasonal cycles its step implies,
or that its periodogram shows (no Lightning/MLflow imports).

- :func:`read_seasons`: everything a datamodule takes from here at once: the calendar inputs and
  the periods handed to a periodic encoding (``data.init_args.seasonality``).

- :func:`calendar_features`: sin/cos of the hour of day and the day of week, as model inputs;
  :func:`auto_calendar` picks the ones that vary at the series' step (``data.calendar: auto``).
- :func:`calendar_cycles`: the daily / weekly / yearly cycles in whole steps of the series' median
  step (24 for hourly data, 48 half-hourly, 7 daily, 52 weekly, 12 monthly).
- :func:`season_period`: the seasonal-naive period in steps: the shortest calendar cycle longer than
  the step (so the daily cycle for sub-daily data, the weekly one for daily data) when the timestamps
  are regular datetimes of at least a second; otherwise (row order, numeric or irregular time,
  sub-second steps) the strongest periodogram peak of the training split.
- :func:`estimate_periods`: dominant seasonal periods in whole steps (periodogram peaks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from datamodules.timeseries.config import CALENDAR_FEATURES, Seasonality
from datamodules.timeseries.timestamps import TimeKind, format_step
from posenc import PosencError, periods_from_data

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
        report: the series' :class:`~datamodules.timeseries.timestamps.SeriesReport` (kind of time,
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


# --------------------------------------------------------------------------------------- a series' seasons
@dataclass
class Seasons:
    """What the calendar gives a series: the calendar inputs used (``auto`` resolved), their values
    (N, 2F) float32 and names (``hour_sin``…), and the periods in steps handed to a periodic encoding
    (``None``: none asked for), with how they were found (``note``, for the log)."""

    calendar: list[str]
    features: np.ndarray
    names: list[str]
    periods: list[float] | None
    note: str = ""


def read_seasons(series: Any, seasonality: Seasonality, timezone: str | None, *, n_train: int,
                 lookback: int, patch_len: int, longest: int) -> Seasons:
    """The calendar inputs and the periods of ``series`` (a :class:`~datamodules.timeseries.parse.Series`)
    as ``seasonality`` asks: periods estimated from the first ``n_train`` rows only (no test leakage),
    between 2 tokens of ``patch_len`` steps and the ``lookback``; calendar cycles up to the ``longest``
    test lookback."""
    report = series.report
    calendar = (auto_calendar(report.step_seconds) if seasonality.calendar == "auto"
                else list(seasonality.calendar or []))
    features = calendar_features(series.timestamps, calendar, timezone, n_rows=len(series),
                                 time_kind=report.time_kind).astype(np.float32)  # (N, 2F)
    names = [f"{f}_{fn}" for f in calendar for fn in ("sin", "cos")]
    periods, how = seasonality.periods, ""
    if periods in ("estimate", "calendar"):
        if periods == "estimate":
            train = series.targets[:n_train, 0]  # training rows only: no test leakage
            periods = estimate_periods(train, max_period=lookback, min_period=2 * patch_len,
                                       top_k=seasonality.n_periods)
            how = "estimated from the training split"
        else:
            periods = calendar_periods(report, seasonality.n_periods, patch_len, longest)
            how = f"calendar cycles of {report.step_label} steps"
        how = f"{report.source}: periods {how}: {periods} steps{durations(periods, report.step_seconds)}"
    elif periods is not None:
        check_periods(periods, patch_len)
    return Seasons(calendar, features, names, None if periods is None else [float(p) for p in periods], how)


def check_periods(periods: Any, patch_len: int) -> None:
    """A list of periods in steps, each at least 2 tokens of ``patch_len`` steps (one line otherwise)."""
    if isinstance(periods, str) or not periods:
        raise PosencError(f"data.init_args.seasonality.periods: must be a list of steps, 'estimate', "
                          f"'calendar' or null, got {periods!r}")
    for p in periods:
        if not p >= 2 * patch_len:
            raise PosencError(f"data.init_args.seasonality.periods: period {p} steps is shorter than 2 "
                              f"tokens of data.init_args.windows.patch_len={patch_len} steps (a "
                              f"rotation needs ≥ 2 positions per cycle)")


def calendar_periods(report: Any, n_periods: int, patch_len: int, longest: int) -> list[int]:
    """The calendar cycles (in steps) of at least 2 patches and at most ``longest`` steps (the longest
    test lookback), the ``n_periods`` shortest; ``report``: the series'
    :class:`~datamodules.timeseries.timestamps.SeriesReport`."""
    if report.step_seconds is None:
        raise PosencError(f"{report.source}: data.init_args.seasonality.periods: calendar needs datetime "
                          f"timestamps, but the time is "
                          f"{'row order' if report.time_kind == 'rows' else 'numeric'}; "
                          f"use data.init_args.seasonality.periods: estimate")
    cycles = [p for _, p in calendar_cycles(report.step_seconds) if 2 * patch_len <= p <= longest]
    if not cycles:
        raise PosencError(f"{report.source}: data.init_args.seasonality.periods: calendar found no "
                          f"daily/weekly/yearly cycle of {report.step_label} steps between 2 patches and "
                          f"{longest} steps; use data.init_args.seasonality.periods: estimate or a list")
    return cycles[:n_periods]


def durations(periods: list[float], step_seconds: float | None) -> str:
    """`` (1d, 7d)``: periods in steps as durations, when the step is a time."""
    if step_seconds is None:
        return ""
    return " (" + ", ".join(format_step(p * step_seconds) for p in periods) + ")"
