"""LightningDataModule serving (lookback → horizon) windows of a time series for forecasting."""

from __future__ import annotations

from dataclasses import asdict
from typing import ClassVar

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from datamodules.config import Loader
from datamodules.paths import resolve_path
from datamodules.sampling import EpochSampler, ShardSampler, eval_shard, train_shard
from datamodules.timeseries.calendar import auto_calendar, calendar_cycles, calendar_features
from datamodules.timeseries.calendar import season_period as choose_season_period
from datamodules.timeseries.config import Cleaning, Seasonality, Source, Windows
from datamodules.timeseries.parse import (
    VIC_ELEC,
    Series,
    check_mostly_observed,
    format_step,
    parse_series,
    read_table,
    vic_elec_path,
)
from datamodules.timeseries.select import future_columns, select_rows
from datamodules.timeseries.windows import (
    ForecastWindows,
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
        source: the file and its columns (:class:`~datamodules.timeseries.config.Source`).
        cleaning: duplicates, gaps and missing values (:class:`~datamodules.timeseries.config.Cleaning`).
        windows: split, lookback, horizon, patches, strides, test lookbacks and positions
            (:class:`~datamodules.timeseries.config.Windows`).
        seasonality: calendar inputs and the periods of a periodic encoding
            (:class:`~datamodules.timeseries.config.Seasonality`).
        loader: batch size, samples per epoch, workers and the sampler's seed
            (:class:`~datamodules.config.Loader`; at longer test lookbacks the batch is scaled down
            to keep tokens per batch).

    Saved hyperparameters are the groups as plain mappings, with the defaults that depend on the
    data resolved (columns, zone, calendar): inference rebuilds its inputs from them.
    """

    config_groups: ClassVar[dict[str, type]] = {"source": Source, "cleaning": Cleaning, "windows": Windows,
                                                "seasonality": Seasonality, "loader": Loader}

    def __init__(
        self,
        source: Source = Source(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        cleaning: Cleaning = Cleaning(),  # noqa: B008
        windows: Windows = Windows(),  # noqa: B008
        seasonality: Seasonality = Seasonality(),  # noqa: B008
        loader: Loader = Loader(),  # noqa: B008
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for name, value in (("source", source), ("cleaning", cleaning), ("windows", windows),
                            ("seasonality", seasonality), ("loader", loader)):
            self.hparams[name] = asdict(value)  # primitive: checkpoints load weights-only
        w, self.loader = windows, loader
        self.lookback, self.horizon, self.patch_len = w.lookback, w.horizon, w.patch_len
        self.positions, self.time_block = w.positions, w.time_block
        self.batch_size, self.samples_per_epoch = loader.batch_size, loader.samples_per_epoch
        self.num_workers, self.seed = loader.num_workers, loader.seed
        self.train_on_filled = cleaning.train_on_filled

        file, targets, covs, future, timezone = self._resolve_data(source)
        covs = list(covs) + [c for c in future if c not in covs]  # known-future columns are inputs too
        # The checkpoint keeps the settings used, defaults resolved (inference rebuilds inputs from them).
        self.hparams["source"].update(target_cols=list(targets), covariate_cols=covs,
                                      future_cols=list(future), timezone=timezone)
        self.source = str(file)
        # Read eagerly: a bad file fails before any trainer, logger or run exists.
        self.series: Series = parse_series(
            select_rows(read_table(file), source.select, file.name), source.time_col, list(targets),
            list(covs), source=file.name, time_format=source.time_format, nan_policy=cleaning.nan_policy,
            fill_gaps=cleaning.fill_gaps, duplicates=cleaning.duplicates,
        )
        rank_zero_info(self.series.report.summary())
        s = self.series
        check_mostly_observed(s.observed, s.target_cols, file.name)  # the benchmark's rule, the same
        self.step_seconds: float | None = s.report.step_seconds  # None: numeric time or row order
        self.freq: str = s.report.step_label  # "1h", "30min", "10ms"; "1 row" for row order
        check_length(len(s), w.lookback, w.horizon, file.name)
        self.n_train, self.n_trainval = split_points(len(s), w.split)
        self._scale(seasonality.calendar, timezone)
        self.future_index = future_columns(s.covariate_cols, list(future), self.covariate_names[len(covs):],
                                           seasonality.future_calendar)
        self._make_windows(w.eval_lookbacks, w.context_from_previous, w.stride, w.eval_stride, file.name)
        self.periods = self._resolve_periods(seasonality.periods, seasonality.n_periods, file.name)

    @staticmethod
    def _resolve_data(source: Source) -> tuple:
        """The file, target, covariate and known-future columns and zone: vic_elec's defaults only
        when ``path`` is null; for any other file the covariates default to none and the zone to the
        data's."""
        path, target_cols, covariate_cols = source.path, source.target_cols, source.covariate_cols
        future_cols, timezone = source.future_cols, source.timezone
        if path is None:
            pick = lambda given, key: given if given is not None else VIC_ELEC[key]  # noqa: E731
            return (vic_elec_path(), pick(target_cols, "target_cols"), pick(covariate_cols, "covariate_cols"),
                    pick(future_cols, "future_cols"), pick(timezone, "timezone"))
        file = resolve_path(path)
        if not target_cols:
            raise PosencError(f"{file}: set data.init_args.source.target_cols (the columns to forecast)")
        return file, target_cols, covariate_cols or [], future_cols or [], timezone

    def _scale(self, calendar, timezone: str | None) -> None:
        """Training-row scalers, scaled targets (N, C) and covariates + calendar (N, K)."""
        s = self.series
        calendar = auto_calendar(self.step_seconds) if calendar == "auto" else list(calendar or [])
        self.hparams["seasonality"]["calendar"] = calendar  # as used (see __init__)
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
                               f"{sorted(set(wanted) - set(lookbacks))}; set "
                               f"data.init_args.windows.eval_lookbacks)")
        self.eval_lookbacks = lookbacks
        self.starts: dict[str, np.ndarray] = {}
        for name, (lo, hi) in bounds.items():
            need = L if name != "test" else max(lookbacks)
            step = stride if name == "train" else eval_stride
            self.starts[name] = window_starts((lo, hi), need, self.horizon, step, context_from=ctx[name])
            if len(self.starts[name]) == 0 and (name != "val" or hi > lo):
                raise PosencError(
                    f"{source}: the {name} split (rows {lo}..{hi - 1}) holds no window of lookback {need} "
                    f"+ horizon {self.horizon}; use a longer series, other data.init_args.windows.split "
                    f"fractions or shorter lookbacks (data.init_args.windows.lookback / "
                    f"data.init_args.windows.eval_lookbacks)"
                )

    def _durations(self, periods: list[float]) -> str:
        """`` (1d, 7d)``: periods in steps as durations, when the step is a time."""
        if self.step_seconds is None:
            return ""
        return " (" + ", ".join(format_step(p * self.step_seconds) for p in periods) + ")"

    def _resolve_periods(self, periods, n_periods: int, source: str) -> list[float] | None:
        """``data.init_args.seasonality.periods`` as a list of steps (estimated from the training split,
        or the calendar cycles of the step, if asked)."""
        if periods is None:
            return None
        if periods in ("estimate", "calendar"):
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
            raise PosencError(f"data.init_args.seasonality.periods: must be a list of steps, 'estimate', "
                              f"'calendar' or null, got {periods!r}")
        for p in periods:
            if not p >= 2 * self.patch_len:
                raise PosencError(f"data.init_args.seasonality.periods: period {p} steps is shorter than 2 "
                                  f"tokens of data.init_args.windows.patch_len={self.patch_len} steps (a "
                                  f"rotation needs ≥ 2 positions per cycle)")
        return [float(p) for p in periods]

    def _calendar_periods(self, n_periods: int, source: str) -> list[int]:
        """The calendar cycles (in steps) of at least 2 patches and at most the longest test lookback."""
        if self.step_seconds is None:
            raise PosencError(f"{source}: data.init_args.seasonality.periods: calendar needs datetime "
                              f"timestamps, but the time is "
                              f"{'row order' if self.series.report.time_kind == 'rows' else 'numeric'}; "
                              f"use data.init_args.seasonality.periods: estimate")
        cycles = [p for _, p in calendar_cycles(self.step_seconds)
                  if 2 * self.patch_len <= p <= max(self.eval_lookbacks)]
        if not cycles:
            raise PosencError(f"{source}: data.init_args.seasonality.periods: calendar found no "
                              f"daily/weekly/yearly cycle of "
                              f"{self.freq} steps between 2 patches and {max(self.eval_lookbacks)} steps; "
                              f"use data.init_args.seasonality.periods: estimate or a list")
        return cycles[:n_periods]

    def season_period(self, max_period: int | None = None) -> tuple[int, str]:
        """The seasonal-naive period in steps and how it was chosen (calendar cycle of the step, or
        the training split's periodogram; see :func:`datamodules.timeseries.calendar.season_period`)."""
        train = self.series.targets[: self.n_train, 0]  # training rows only: no test leakage
        return choose_season_period(self.series.report, train, max_period or self.lookback)

    @property
    def pe_periods(self) -> list[float] | None:
        """``data.init_args.seasonality.periods`` in token positions (steps ÷ ``patch_len``), linked to the
        model's ``pe_periods``; ``None`` when ``data.init_args.seasonality.periods`` is unset."""
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
        ds = ForecastWindows(
            self.targets, self.series.observed, self.covariates, self.series.time, self.starts[split],
            lookback or self.lookback, self.horizon, self.positions,
            loss_on_filled=self.train_on_filled and split == "train",
            loc=self.target_loc, scale=self.target_scale, future_index=self.future_index,
        )
        if self.time_block is not None and split != "train":  # windows are in time order
            ds.window_blocks = np.arange(len(ds)) // self.time_block  # (windows,) block of each
        return ds

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
