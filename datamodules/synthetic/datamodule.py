"""LightningDataModules over the synthetic generators of :mod:`datamodules.synthetic.generators`.

* :class:`SyntheticLMDataModule` — windows ``(B, T + 1)`` of the retrieval (``task="copy"``) or the
  periodic (``task="periodic"``) process, for :class:`pipelines.DNALanguageModel`; test loaders one
  per evaluation length, every length tiling the same test tokens (like the DNA datamodules).
* :class:`SyntheticMotifDataModule` — ``{"tokens": (B, T), "label": (B,)}`` of the motif-spacing
  task, for the sequence classifiers; each test length has its own windows.

Both expose :meth:`reference`: the trivial and the Bayes-optimal value of the task metric at a test
length (bits per token for the LM, accuracy for the classifier), on the same test data.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import ClassVar

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.config import Loader
from datamodules.memo import memo_item
from datamodules.synthetic import generators as gen
from datamodules.synthetic import helical
from datamodules.synthetic.config import LMProcess, LMWindows, Motifs, SampleWindows, check_lengths, region
from posenc import PosencError

SALT = {"train": 0, "val": 1, "test": 2}


class _TensorWindows(Dataset):
    def __init__(self, x: np.ndarray) -> None:
        self.x = torch.as_tensor(x)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


class SyntheticLMDataModule(L.LightningDataModule):
    """Causal-LM windows of a synthetic process with a known optimum.

    Args:
        process: the token process: ``copy``, ``periodic``, ``two_periods`` or ``helical``, its
            vocabulary, distance, periods and noise (:class:`~datamodules.synthetic.config.LMProcess`).
        windows: training length, test lengths and test tokens per length
            (:class:`~datamodules.synthetic.config.LMWindows`).
        loader: batch size, training windows per epoch, workers and the generator's seed (train, val
            and test draw from separate streams; :class:`~datamodules.config.Loader`).
    """

    config_groups: ClassVar[dict[str, type]] = {"process": LMProcess, "windows": LMWindows, "loader": Loader}

    def __init__(
        self,
        process: LMProcess = LMProcess(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        windows: LMWindows = LMWindows(),  # noqa: B008
        loader: Loader = Loader(batch_size=32, samples_per_epoch=6400),  # noqa: B008
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for name, value in (("process", process), ("windows", windows), ("loader", loader)):
            self.hparams[name] = asdict(value)  # primitive: checkpoints load weights-only
        if loader.samples_per_epoch is None:
            raise PosencError("data.init_args.loader.samples_per_epoch: must be set (training windows are "
                              "drawn, not read)")
        p = process
        self.task, self.vocab, self.distance, self.period = p.task, p.vocab, p.distance, p.period
        self.noise = p.noise
        self.helical_period, self.vocab_each = float(p.helical_period), math.isqrt(p.vocab)
        self.periods = (int(p.period), int(p.period2 or 0))
        self.seq_len = int(windows.seq_len)
        self.eval_lengths = check_lengths(windows.seq_len, windows.eval_lengths)
        self.eval_tokens = windows.eval_tokens
        self.batch_size, self.samples_per_epoch = loader.batch_size, loader.samples_per_epoch
        self.seed, self.num_workers = loader.seed, loader.num_workers
        self._cache: dict[str, np.ndarray] = {}

    trivial_name = "uniform tokens (log2 V bits)"

    @property
    def vocab_size(self) -> int:
        return self.vocab + 1

    @property
    def data_periods(self) -> tuple[int, ...]:
        """The process's periods in tokens: () for copy, (p,) for periodic, (p₁, p₂) for two_periods."""
        if self.task == "helical":
            return ()  # not a whole number of tokens (10.5); the bands study does not use this testbed
        return {"copy": (), "periodic": self.periods[:1], "two_periods": self.periods}[self.task]

    @property
    def pad_id(self) -> int:
        return self.vocab

    def windows(self, split: str, n: int, length: int) -> np.ndarray:
        """``n`` windows (n, length + 1) of ``split``'s stream."""
        rng = np.random.default_rng([self.seed, SALT[split], length])
        if self.task == "copy":
            return gen.copy_windows(n, length, self.vocab, self.distance, self.noise, rng)
        if self.task == "helical":
            return helical.helical_windows(n, length, rng, period=self.helical_period)
        if self.task == "two_periods":
            return gen.two_period_windows(n, length, self.vocab_each, self.periods, self.noise, rng)
        return gen.periodic_windows(n, length, self.vocab, self.period, self.noise, rng)

    def eval_windows(self, split: str, length: int) -> np.ndarray:
        """Windows (N, length + 1) tiling the same tokens at every length: each window of the
        longest length cut into consecutive pieces of ``length`` targets (both processes are
        stationary, so a piece is a window of the process)."""
        longest = max(self.eval_lengths)
        if split not in self._cache:
            n = max(1, self.eval_tokens // longest)
            self._cache[split] = self.windows(split, n, longest)
        full = self._cache[split]  # (N, longest + 1)
        k = longest // length
        pieces = [full[:, i * length : i * length + length + 1] for i in range(k)]
        return np.concatenate(pieces, axis=0)  # (N·k, length + 1)

    def reference(self, length: int) -> dict[str, float]:
        """Trivial and Bayes-optimal bits per token on the test windows of ``length``."""
        if self.task == "copy":
            return gen.copy_bits(length, self.vocab, self.distance, self.noise)
        if self.task == "helical":  # no closed-form Bayes predictor (unknown phase): optimal is NaN
            return {"trivial": 2.0, "optimal": float("nan")}
        if self.task == "two_periods":
            windows = self.eval_windows("test", length)
            bits = gen.two_period_bits(windows, self.vocab_each, self.periods, self.noise)
            return {"trivial": float(np.log2(self.vocab)), "optimal": float(bits.mean())}
        bits = gen.periodic_bits(self.eval_windows("test", length), self.vocab, self.period, self.noise)
        return {"trivial": float(np.log2(self.vocab)), "optimal": float(bits.mean())}

    def train_dataloader(self) -> DataLoader:
        x = self.windows("train", self.samples_per_epoch, self.seq_len)
        g = torch.Generator().manual_seed(self.seed)
        return DataLoader(_TensorWindows(x), batch_size=self.batch_size, shuffle=True, generator=g,
                          num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_TensorWindows(self.eval_windows("val", self.seq_len)), batch_size=self.batch_size,
                          num_workers=self.num_workers)

    def test_dataloader(self) -> list[DataLoader]:
        return [DataLoader(_TensorWindows(self.eval_windows("test", n)), batch_size=self.batch_size,
                           num_workers=self.num_workers) for n in self.eval_lengths]


class _MotifWindows(Dataset):
    def __init__(self, dm: SyntheticMotifDataModule, split: str, length: int, size: int) -> None:
        self.dm, self.split, self.length, self.size = dm, split, length, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        dm = self.dm
        region = (
            dm.train_region if self.split == "train" else dm.test_region if self.split == "test" else (0, 1)
        )
        key = ("motif", dm.seed, SALT[self.split], self.length, i, dm.motif_a.tobytes(), dm.motif_b.tobytes(),
               dm.distance, dm.negative, dm.label_noise, tuple(region))
        return dict(memo_item(key, lambda: self._draw(i, region)))  # the same window for every model

    def _draw(self, i: int, region: tuple[float, float]) -> dict[str, torch.Tensor]:
        dm = self.dm
        rng = np.random.default_rng([dm.seed, SALT[self.split], self.length, i])
        seq, label = gen.motif_window(
            self.length, dm.motif_a, dm.motif_b, dm.distance, dm.negative, dm.label_noise, rng, region
        )
        return {"tokens": torch.as_tensor(seq), "label": torch.tensor(label)}


class SyntheticMotifDataModule(L.LightningDataModule):
    """Motif-spacing classification on DNA-like bases (see :func:`generators.motif_window`).

    Args:
        motifs: the two motifs (or marker tokens), the spacing that makes label 1, the negatives, the
            label noise and where the pair may start in training and test windows
            (:class:`~datamodules.synthetic.config.Motifs`).
        windows: training window, test windows (bases) and val/test windows per length
            (:class:`~datamodules.synthetic.config.SampleWindows`).
        loader: batch size, training windows per epoch, workers and the generator's seed
            (:class:`~datamodules.config.Loader`).
    """

    config_groups: ClassVar[dict[str, type]] = {"motifs": Motifs, "windows": SampleWindows, "loader": Loader}

    def __init__(
        self,
        motifs: Motifs = Motifs(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        windows: SampleWindows = SampleWindows(),  # noqa: B008
        loader: Loader = Loader(batch_size=64, samples_per_epoch=8192),  # noqa: B008
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for name, value in (("motifs", motifs), ("windows", windows), ("loader", loader)):
            self.hparams[name] = asdict(value)  # primitive: checkpoints load weights-only
        if loader.samples_per_epoch is None:
            raise PosencError("data.init_args.loader.samples_per_epoch: must be set (training windows are "
                              "drawn, not read)")
        m = motifs
        self.motif_a, self.motif_b = _motif(m.motif_a), _motif(m.motif_b)
        if m.marker_motifs:
            self.motif_a, self.motif_b = np.array([gen.BASES]), np.array([gen.BASES + 1])
        self.n_tokens = gen.BASES + (2 if m.marker_motifs else 0)  # ids the windows use
        self.distance, self.negative, self.label_noise = int(m.distance), m.negative, float(m.label_noise)
        self.train_region, self.test_region = region(m.train_region, "train_region"), region(m.test_region,
                                                                                              "test_region")
        self.seq_len = int(windows.seq_len)
        self.eval_lengths = check_lengths(windows.seq_len, windows.eval_lengths)
        need = len(self.motif_a) + len(self.motif_b) + 2 * self.distance
        if self.seq_len < need:
            raise PosencError(f"data.init_args.windows.seq_len={self.seq_len} cannot hold both motifs "
                              f"{2 * self.distance} bases apart")
        self.batch_size, self.seed, self.num_workers = loader.batch_size, loader.seed, loader.num_workers
        self.sizes = {"train": loader.samples_per_epoch, "val": windows.eval_samples,
                      "test": windows.eval_samples}

    num_classes = 2

    @property
    def vocab_size(self) -> int:
        return self.n_tokens + 1

    @property
    def pad_id(self) -> int:
        return self.n_tokens

    def reference(self, length: int) -> dict[str, float]:
        """Trivial (0.5) and optimal (1 − label noise) accuracy at any length."""
        return gen.motif_accuracy(self.label_noise)

    def _loader(self, split: str, length: int, shuffle: bool = False) -> DataLoader:
        g = torch.Generator().manual_seed(self.seed) if shuffle else None
        ds = _MotifWindows(self, split, length, self.sizes[split])
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, generator=g,
                          num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.seq_len, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.seq_len)

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader("test", n) for n in self.eval_lengths]


def _motif(text: str) -> np.ndarray:
    """A motif over ACGT as base codes (checked by :class:`~datamodules.synthetic.config.Motifs`)."""
    return np.array(["ACGT".index(c) for c in text], dtype=np.int64)
