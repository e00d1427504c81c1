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
from datamodules.timeseries.calendar import read_seasons
from datamodules.timeseries.calendar import season_period as choose_season_period
from datamodules.timeseries.config import Cleaning, Seasonality, Source, Windows
from datamodules.timeseries.parse import VIC_ELEC, Series, check_mostly_observed, parse_series, vic_elec_path
from datamodules.timeseries.select import future_columns
from datamodules.timeseries.windows import ForecastWindows, gather_windows, layout_windows, scale_series
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
        # Read eagerly, in one pass: a bad file fails before any trainer, logger or run exists.
        self.series: Series = parse_series(
            file, source.time_col, list(targets), covs, select=source.select, source=file.name,
            time_format=source.time_format, nan_policy=cleaning.nan_policy, fill_gaps=cleaning.fill_gaps,
            duplicates=cleaning.duplicates)
        report = self.series.report
        rank_zero_info(report.summary())
        check_mostly_observed(self.series.observed, self.series.target_cols, file.name)  # LTSF's rule
        self.step_seconds: float | None = report.step_seconds  # None: numeric time or row order
        self.freq: str = report.step_label  # "1h", "30min", "10ms"; "1 row" for row order
        layout = layout_windows(len(self.series), w, file.name)
        self.n_train, self.n_trainval, self.bounds = layout.n_train, layout.n_trainval, layout.bounds
        self.starts, self.eval_lookbacks = layout.starts, layout.eval_lookbacks
        self.target_scaler, self.targets, covariates = scale_series(self.series, layout.n_train)
        seasons = read_seasons(self.series, seasonality, timezone, n_train=layout.n_train,
                               lookback=w.lookback, patch_len=w.patch_len, longest=max(layout.eval_lookbacks))
        self.hparams["seasonality"]["calendar"] = seasons.calendar  # as used (see above)
        self.covariates = np.concatenate([covariates, seasons.features], axis=1)  # (N, K) float32
        self.covariate_names = self.series.covariate_cols + seasons.names
        self.periods = seasons.periods
        self.future_index = future_columns(covs, list(future), seasons.names, seasonality.future_calendar)
        for note in (layout.note, seasons.note):
            if note:
                rank_zero_info(note)

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
