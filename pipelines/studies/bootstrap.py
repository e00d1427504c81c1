"""Bootstrap over seeds and over blocks of the test region, in float64.

A trained arm (one scheme or condition) is measured on ``S`` seeds; where the task scores its test
region as ``K`` separate blocks (the DNA LM: K evenly spread stretches of the test region), each
seed's metric is a ratio of additive parts, ``metric_s = Σ_k sums[s, k] / Σ_k counts[s, k]`` (bits
summed and bases scored per block). Where there are no blocks, ``K = 1`` and ``sums`` is the metric.

One replicate draws the seeds with replacement *and* the blocks with replacement (the same block
draw for every seed and every arm, because every seed and every arm is scored on the same test
region); a block is kept whole — its sum and count move together, never split. Arms compared with
the same :class:`Resampler` are resampled with the same draws, so their replicates are *paired*.

Intervals are percentile intervals of the replicates; the two-sided p-value of "the statistic is 0"
is the one that percentile intervals invert: ``p < 1 − level`` exactly when the ``level`` interval
excludes 0 (up to the replicates' resolution, 1 / (n_boot + 1)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

N_BOOT = 10_000  # replicates: p-values resolve down to 1e-4, below Holm's α/m for m ≲ 400 calls
BOOT_SEED = 26  # fixed: the same data give the same interval on every run


@dataclass(frozen=True)
class Arm:
    """One arm's additive parts per seed and block: ``sums`` and ``counts``, both (S, K) float64."""

    sums: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        sums = np.asarray(self.sums, dtype=np.float64)
        counts = np.broadcast_to(np.asarray(self.counts, dtype=np.float64), sums.shape)
        if sums.ndim != 2 or sums.size == 0:
            raise ValueError(f"an arm needs (seeds, blocks) sums, got shape {sums.shape}")
        if not (counts > 0).all():
            raise ValueError("every block needs a positive count")
        object.__setattr__(self, "sums", sums)
        object.__setattr__(self, "counts", np.array(counts))

    @classmethod
    def from_values(cls, values: Sequence[float]) -> Arm:
        """An arm without blocks: one metric value per seed (K = 1)."""
        x = np.asarray(values, dtype=np.float64).reshape(-1, 1)  # (S, 1)
        return cls(x, np.ones_like(x))

    @classmethod
    def from_blocks(cls, blocks: Sequence[np.ndarray]) -> Arm:
        """An arm from one (K, 2) array of (sum, count) rows per seed."""
        stacked = np.stack([np.asarray(b, dtype=np.float64) for b in blocks])  # (S, K, 2)
        if stacked.ndim != 3 or stacked.shape[2] != 2:
            raise ValueError(f"per-seed blocks must be (K, 2) arrays of (sum, count): {stacked.shape[1:]}")
        return cls(stacked[..., 0], stacked[..., 1])

    @property
    def n_seeds(self) -> int:
        return int(self.sums.shape[0])

    @property
    def n_blocks(self) -> int:
        return int(self.sums.shape[1])

    def values(self) -> np.ndarray:
        """Each seed's metric on the whole test region, (S,)."""
        return self.sums.sum(axis=1) / self.counts.sum(axis=1)


class Resampler:
    """One set of bootstrap draws over ``n_seeds`` seeds and ``n_blocks`` blocks, shared by every arm
    it resamples (so that their replicates are paired).

    Args:
        n_seeds: seeds per arm (S).
        n_blocks: blocks per seed (K; 1 = no blocks, nothing to draw).
        n_boot: replicates (B).
        seed: the generator's seed.
        seeds: whether to resample seeds (False: every replicate keeps every seed once).
    """

    def __init__(self, n_seeds: int, n_blocks: int = 1, n_boot: int = N_BOOT, seed: int = BOOT_SEED,
                 seeds: bool = True) -> None:
        rng = np.random.default_rng(seed)
        self.n_seeds, self.n_blocks, self.n_boot = int(n_seeds), int(n_blocks), int(n_boot)
        self.block_w = self._weights(rng, self.n_blocks)  # (B, K) how often each block is drawn
        self.seed_w = self._weights(rng, self.n_seeds) if seeds else np.ones((self.n_boot, self.n_seeds))

    def _weights(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(B, n) counts of n draws with replacement from n items (each row sums to n)."""
        if n == 1:
            return np.ones((self.n_boot, 1))
        draws = rng.integers(0, n, size=(self.n_boot, n))  # (B, n) indices
        flat = (draws + n * np.arange(self.n_boot)[:, None]).ravel()  # (B·n,) row-offset indices
        return np.bincount(flat, minlength=self.n_boot * n).reshape(self.n_boot, n).astype(np.float64)

    def metric(self, arm: Arm) -> np.ndarray:
        """(B,) replicates of the arm's mean over seeds of its metric on the drawn blocks."""
        if (arm.n_seeds, arm.n_blocks) != (self.n_seeds, self.n_blocks):
            raise ValueError(f"arm has {arm.n_seeds} seeds × {arm.n_blocks} blocks, the resampler "
                             f"{self.n_seeds} × {self.n_blocks}")
        per_seed = (self.block_w @ arm.sums.T) / (self.block_w @ arm.counts.T)  # (B, S)
        return (self.seed_w * per_seed).sum(axis=1) / self.seed_w.sum(axis=1)

    def mean(self, values: Sequence[float]) -> np.ndarray:
        """(B,) replicates of the mean over resampled seeds of one value per seed (no blocks)."""
        x = np.asarray(values, dtype=np.float64)  # (S,)
        return (self.seed_w @ x) / self.seed_w.sum(axis=1)


def percentile_interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    """The ``level`` percentile interval of the replicates (NaN replicates: NaN interval)."""
    reps = np.asarray(replicates, dtype=np.float64)
    if reps.size == 0 or not np.isfinite(reps).all():
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(reps, [tail, 1.0 - tail])
    return float(lo), float(hi)


def p_value(replicates: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the statistic is 0": twice the smaller share of replicates on
    either side of 0, with the (count + 1) / (B + 1) correction; at most 1."""
    reps = np.asarray(replicates, dtype=np.float64)
    if reps.size == 0 or not np.isfinite(reps).all():
        return float("nan")
    below, above = int((reps <= 0).sum()), int((reps >= 0).sum())
    return float(min(1.0, 2.0 * (min(below, above) + 1) / (reps.size + 1)))
