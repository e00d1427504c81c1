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
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.memo import memo_item
from datamodules.synthetic import generators as gen
from datamodules.synthetic import helical
from posenc import PosencError

SALT = {"train": 0, "val": 1, "test": 2}


def _lengths(seq_len: int, eval_lengths: list[int] | None) -> list[int]:
    lengths = [int(n) for n in (eval_lengths or [seq_len])]
    if lengths[0] != seq_len or any(b <= a for a, b in zip(lengths, lengths[1:], strict=False)):
        raise PosencError(
            f"data.eval_lengths must start at data.seq_len={seq_len} and increase, got {lengths}"
        )
    return lengths


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
        task: ``copy`` (token t repeats token t − ``distance``), ``periodic`` (period ``period``) or
            ``two_periods`` (tokens a·√V + b, ``a`` of period ``period``, ``b`` of period ``period2``)
            or ``helical`` (bases with AA/TT at ~``helical_period``-bp crests, :mod:`.helical`; V = 4).
        vocab: tokens of the process (the model's vocabulary adds one unused PAD id); a square for
            ``two_periods`` (√V symbols per component).
        distance: the retrieval distance d (copy).
        period: the period p (periodic; the first component's for two_periods).
        period2: the second component's period (two_periods).
        noise: probability that a token is re-drawn uniformly.
        seq_len: training window L0 (targets per window).
        eval_lengths: test lengths, the first = ``seq_len`` (e.g. up to 8·L0).
        batch_size, samples_per_epoch: training batches.
        eval_tokens: test (and validation) tokens per length, tiled from windows of the longest length.
        seed: generator seed (train, val and test draw from separate streams).
        helical_period: the planted helical period in bases (helical).
    """

    def __init__(
        self,
        task: str = "copy",
        vocab: int = 16,
        distance: int = 32,
        period: int = 12,
        period2: int | None = None,
        noise: float = 0.1,
        seq_len: int = 64,
        eval_lengths: list[int] | None = None,
        batch_size: int = 32,
        samples_per_epoch: int = 6400,
        eval_tokens: int = 16384,
        seed: int = 0,
        helical_period: float = 10.5,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if task not in ("copy", "periodic", "two_periods", "helical"):
            raise PosencError(f"data.task must be copy, periodic, two_periods or helical, got {task!r}")
        if task == "helical" and vocab != 4:
            raise PosencError(f"data.task 'helical' is DNA-like: data.vocab must be 4, got {vocab}")
        self.helical_period = float(helical_period)
        self.vocab_each = math.isqrt(vocab) if vocab > 0 else 0
        if task == "two_periods" and (self.vocab_each**2 != vocab or period2 is None or period2 < 1):
            raise PosencError(f"data.task 'two_periods' needs a square data.vocab and data.period2 >= 1, got "
                              f"vocab={vocab}, period2={period2}")
        if not 0.0 <= noise < 1.0 or vocab < 2:
            raise PosencError(f"data.noise must be in [0, 1) and data.vocab >= 2, got {noise}, {vocab}")
        self.task, self.vocab, self.distance, self.period, self.noise = task, vocab, distance, period, noise
        self.periods = (int(period), int(period2 or 0))
        self.seq_len, self.eval_lengths = int(seq_len), _lengths(seq_len, eval_lengths)
        self.batch_size, self.samples_per_epoch, self.seed = batch_size, samples_per_epoch, seed
        self.eval_tokens = eval_tokens
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
        return DataLoader(_TensorWindows(x), batch_size=self.batch_size, shuffle=True, generator=g)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_TensorWindows(self.eval_windows("val", self.seq_len)), batch_size=self.batch_size)

    def test_dataloader(self) -> list[DataLoader]:
        return [
            DataLoader(_TensorWindows(self.eval_windows("test", n)), batch_size=max(1, self.batch_size))
            for n in self.eval_lengths
        ]


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
        motif_a, motif_b: the two motifs (strings over ACGT).
        marker_motifs: plant two tokens of their own (ids 4 and 5, outside ACGT) instead of
            ``motif_a``/``motif_b``: the spacing is then the only thing to learn (no motif to detect).
        train_region, test_region: where the pair may start in training / test windows, as a
            fraction [lo, hi] of the possible starts (e.g. [0, 0.5] and [0.5, 1]: tested only at
            positions never trained; validation windows place it anywhere).
        distance: the spacing (bases between A's end and B's start) that makes label 1.
        negative: ``spacing`` (label 0 = another spacing) or ``order`` (label 0 = B before A).
        label_noise: probability that a label is flipped (optimal accuracy = 1 − label_noise).
        seq_len, eval_lengths: training window and test windows (bases).
        batch_size, samples_per_epoch, eval_samples: batch size, training and val/test windows.
        seed: generator seed.
    """

    def __init__(
        self,
        motif_a: str = "ACGTTG",
        motif_b: str = "GATCCA",
        distance: int = 8,
        negative: str = "spacing",
        label_noise: float = 0.0,
        marker_motifs: bool = False,
        train_region: tuple[float, float] = (0.0, 1.0),
        test_region: tuple[float, float] = (0.0, 1.0),
        seq_len: int = 64,
        eval_lengths: list[int] | None = None,
        batch_size: int = 64,
        samples_per_epoch: int = 8192,
        eval_samples: int = 1024,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.motif_a, self.motif_b = _motif(motif_a, "motif_a"), _motif(motif_b, "motif_b")
        if marker_motifs:
            self.motif_a, self.motif_b = np.array([gen.BASES]), np.array([gen.BASES + 1])
        self.n_tokens = gen.BASES + (2 if marker_motifs else 0)  # ids the windows use
        if negative not in ("spacing", "order"):
            raise PosencError(f"data.negative must be 'spacing' or 'order', got {negative!r}")
        if not 0.0 <= label_noise < 0.5:
            raise PosencError(f"data.label_noise must be in [0, 0.5), got {label_noise}")
        self.distance, self.negative, self.label_noise = int(distance), negative, float(label_noise)
        self.train_region, self.test_region = (
            _region(train_region, "train_region"),
            _region(test_region, "test_region"),
        )
        self.seq_len, self.eval_lengths = int(seq_len), _lengths(seq_len, eval_lengths)
        need = len(self.motif_a) + len(self.motif_b) + 2 * self.distance
        if self.seq_len < need:
            raise PosencError(
                f"data.seq_len={seq_len} cannot hold both motifs {2 * self.distance} bases apart"
            )
        self.batch_size, self.seed = batch_size, seed
        self.sizes = {"train": samples_per_epoch, "val": eval_samples, "test": eval_samples}

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
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, generator=g)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.seq_len, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.seq_len)

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader("test", n) for n in self.eval_lengths]


def _motif(text: str, name: str) -> np.ndarray:
    if not text or set(text) - set("ACGT"):
        raise PosencError(f"data.{name} must be a non-empty string of A, C, G, T, got {text!r}")
    return np.array(["ACGT".index(c) for c in text], dtype=np.int64)


def _region(value: Any, name: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        lo, hi = 1.0, 0.0
    if not 0.0 <= lo <= hi <= 1.0:
        raise PosencError(f"data.{name} must be [lo, hi] with 0 <= lo <= hi <= 1, got {value!r}")
    return lo, hi
