"""The LTSF protocol's windows (:mod:`datamodules.timeseries.ltsf`) as a LightningDataModule, so the
project's forecasters train on them with the Lightning loop, built from a config like any other::

    data:
      class_path: datamodules.timeseries.ltsf_data.LTSFDataModule
      init_args:
        source: {path: ETTh1.csv}            # time_col date; every other column a channel
        windows: {lookback: 336, horizon: 96}
        loader: {batch_size: 128, samples_per_epoch: 2048}

The flat spelling of before (``init_args: {path: ETTh1.csv, lookback: 336, batch_size: 128}``) is
translated into the groups where settings come in (:mod:`pipelines.tasks.upgrade.legacy`).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import ClassVar

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from datamodules.config import Loader
from datamodules.sampling import EpochSampler, ShardSampler, eval_shard, train_shard
from datamodules.timeseries.config import LTSFSplit, LTSFWindows, Source
from datamodules.timeseries.ltsf import load_ltsf
from datamodules.timeseries.windows import ForecastWindows
from posenc import PosencError

#: what the protocol reads of the shared source group (every other column of the file is a channel)
SOURCE_FIELDS = ("path", "time_col", "target_cols")


class LTSFDataModule(L.LightningDataModule):
    """Train / val / test windows of a file under the protocol at one lookback and horizon.

    The file is read and scaled (train rows only) by :func:`~datamodules.timeseries.ltsf.load_ltsf`
    when the module is built (through ``split.cache_dir`` when set: the benchmark's runs load what its
    parent parsed); ``data`` is the resulting :class:`~datamodules.timeseries.ltsf.LTSFData`.
    Batches are the Forecaster's (``x``, ``cov``, ``pos``, ``y``, masks, ``loc``/``scale``) with no
    covariates and the identity scaler: the data are already scaled, so the Forecaster's "original
    units" metrics (``val/mse``) are the protocol's scaled ones. Training windows: every train
    window once per epoch (or ``samples_per_epoch`` of them) in a seeded order; val/test windows:
    every window, in order (the fit's val loader every ``windows.val_stride``-th).

    Args:
        source: the file and its time column (:class:`~datamodules.timeseries.config.Source`; ``path``
            required, ``time_col`` default ``date``, ``target_cols`` default every other column);
            the protocol reads no covariates, selection, format or zone.
        split: the protocol, explicit row borders and the parse cache
            (:class:`~datamodules.timeseries.config.LTSFSplit`).
        windows: lookback, horizon and the fit's val stride
            (:class:`~datamodules.timeseries.config.LTSFWindows`).
        loader: batch size, training windows per epoch, workers and the seed of the windows' order
            (:class:`~datamodules.config.Loader`).
    """

    config_groups: ClassVar[dict[str, type]] = {"source": Source, "split": LTSFSplit, "windows": LTSFWindows,
                                                "loader": Loader}

    def __init__(
        self,
        source: Source = Source(time_col="date"),  # noqa: B008 - frozen dataclasses: a shared default is safe
        split: LTSFSplit = LTSFSplit(),  # noqa: B008
        windows: LTSFWindows = LTSFWindows(),  # noqa: B008
        loader: Loader = Loader(batch_size=128),  # noqa: B008
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for name, value in (("source", source), ("split", split), ("windows", windows), ("loader", loader)):
            self.hparams[name] = asdict(value)  # primitive: checkpoints load weights-only
        ignored = [f.name for f in fields(source) if f.name not in SOURCE_FIELDS
                   and getattr(source, f.name) != getattr(Source(), f.name)]
        if source.path is None or ignored:
            what = f"reads no {', '.join(ignored)}" if ignored else "needs the file (path)"
            raise PosencError(f"data.init_args.source: the LTSF protocol {what}; every column but "
                              f"source.time_col is a channel")
        borders = tuple(split.borders) if split.borders else None
        self.data = load_ltsf(source.path, source.time_col, source.target_cols, borders, split.protocol,
                              split.cache_dir)
        self.lookback, self.horizon, self.val_stride = windows.lookback, windows.horizon, windows.val_stride
        self.batch_size, self.seed, self.num_workers = loader.batch_size, loader.seed, loader.num_workers
        self.samples_per_epoch = loader.samples_per_epoch
        self.n_targets = self.data.n_channels
        for name in ("train", "val", "test"):
            self.data.windows(name, self.lookback, self.horizon)  # a clear error now when a split holds none

    def dataset(self, split: str, lookback: int | None = None, stride: int = 1) -> ForecastWindows:
        lookback = lookback or self.lookback
        values = self.data.values
        n, c = values.shape
        starts = self.data.starts(split, lookback, self.horizon)[::stride]
        return ForecastWindows(values, np.ones((n, c), dtype=bool), np.zeros((n, 0), dtype=np.float32),
                               np.arange(n, dtype=np.float64), starts, lookback, self.horizon)

    def train_dataloader(self) -> DataLoader:
        ds = self.dataset("train")
        sampler = EpochSampler(len(ds), self.samples_per_epoch, self.seed, *train_shard(self.trainer))
        return DataLoader(ds, batch_size=self.batch_size, sampler=sampler, num_workers=self.num_workers)

    def eval_dataloader(self, split: str, lookback: int | None = None, stride: int = 1) -> DataLoader:
        ds = self.dataset(split, lookback, stride)
        sampler = ShardSampler(len(ds), *eval_shard(self.trainer), what=f"{split} windows")
        return DataLoader(ds, batch_size=self.batch_size, sampler=sampler, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self.eval_dataloader("val", stride=self.val_stride)
