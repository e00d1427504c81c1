"""The LTSF protocol's windows (:mod:`datamodules.timeseries.ltsf`) as a LightningDataModule, so the
project's forecasters train on them with the Lightning loop, built from a config like any other::

    data:
      class_path: datamodules.timeseries.ltsf_data.LTSFDataModule
      init_args: {path: ETTh1.csv, lookback: 336, horizon: 96, batch_size: 128, samples_per_epoch: 2048}
"""

from __future__ import annotations

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from datamodules.sampling import EpochSampler, ShardSampler, eval_shard, train_shard
from datamodules.timeseries.ltsf import read_ltsf
from datamodules.timeseries.windows import ForecastWindows
from posenc import PosencError


class LTSFDataModule(L.LightningDataModule):
    """Train / val / test windows of a file under the protocol at one lookback and horizon.

    The file is read and scaled (train rows only) by :func:`~datamodules.timeseries.ltsf.read_ltsf`
    when the module is built; ``data`` is the resulting :class:`~datamodules.timeseries.ltsf.LTSFData`.
    Batches are the Forecaster's (``x``, ``cov``, ``pos``, ``y``, masks, ``loc``/``scale``) with no
    covariates and the identity scaler: the data are already scaled, so the Forecaster's "original
    units" metrics (``val/mse``) are the protocol's scaled ones. Training windows: every train
    window once per epoch (or ``samples_per_epoch`` of them) in a seeded order; val/test windows:
    every window, in order.

    Args:
        path: the series (CSV or parquet, e.g. ETTh1.csv).
        lookback: input steps L.
        horizon: forecast steps H.
        time_col: the timestamp column; every other column is a channel.
        borders: the split's row borders (train end, val end, test end); ``None``: the protocol's.
        protocol: ``ett`` or ``custom`` (``None``: recognised from the file name, see
            :func:`~datamodules.timeseries.ltsf.detect_protocol`).
        batch_size: windows per batch.
        seed: seed of the training order.
        samples_per_epoch: random training windows per epoch (``None``: every window once).
        val_stride: the validation loader of the fit (early stopping, the best-epoch checkpoint) reads
            every ``val_stride``-th val window, spread evenly over the whole val period; the protocol's
            reported val and test metrics still score every window (:class:`LTSFProtocol`).
    """

    def __init__(self, path: str, lookback: int = 336, horizon: int = 96, time_col: str = "date",
                 borders: tuple[int, int, int] | None = None, protocol: str | None = None,
                 batch_size: int = 128, seed: int = 0, samples_per_epoch: int | None = None,
                 val_stride: int = 1) -> None:
        super().__init__()
        if int(val_stride) < 1:
            raise PosencError(f"data.init_args.val_stride must be at least 1, got {val_stride}")
        self.data = read_ltsf(path, time_col=time_col, borders=tuple(borders) if borders else None,
                              protocol=protocol)
        self.lookback, self.horizon = lookback, horizon
        self.batch_size, self.seed, self.samples_per_epoch = batch_size, seed, samples_per_epoch
        self.val_stride = int(val_stride)
        self.n_targets = self.data.n_channels
        for split in ("train", "val", "test"):
            self.data.windows(split, lookback, horizon)  # a clear error now when a split holds no window

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
        return DataLoader(ds, batch_size=self.batch_size, sampler=sampler)

    def eval_dataloader(self, split: str, lookback: int | None = None, stride: int = 1) -> DataLoader:
        ds = self.dataset(split, lookback, stride)
        sampler = ShardSampler(len(ds), *eval_shard(self.trainer), what=f"{split} windows")
        return DataLoader(ds, batch_size=self.batch_size, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        return self.eval_dataloader("val", stride=self.val_stride)
