"""Seed × time-block bootstrap (issue 39), float64: blocks are contiguous and whole, and on a
correlated series the block interval is wider than the window-by-window (iid) one."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.eval import time_blocks as tb


def ar1(n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """A stationary AR(1) series of length n (unit innovation variance)."""
    x = np.empty(n, dtype=np.float64)
    x[0] = rng.normal() / np.sqrt(1.0 - rho**2)
    eps = rng.normal(size=n)
    for t in range(1, n):
        x[t] = rho * x[t - 1] + eps[t]
    return x


def test_blocks_are_contiguous_and_keep_the_remainder():
    table = tb.time_block_table(np.arange(10, dtype=np.float64), 4)
    assert table.dtype == np.float64
    np.testing.assert_array_equal(table, [[0 + 1 + 2 + 3, 4], [4 + 5 + 6 + 7, 4], [8 + 9, 2]])
    assert table[:, 0].sum() == 45.0 and table[:, 1].sum() == 10.0


def test_bad_block_length_and_ragged_seeds_are_refused():
    with pytest.raises(ValueError, match="block length"):
        tb.time_block_table([1.0, 2.0], 0)
    with pytest.raises(ValueError, match="same number"):
        tb.time_block_arm([[1.0] * 8, [1.0] * 12], 4)


def test_block_interval_is_wider_than_iid_on_an_ar1_series():
    rng = np.random.default_rng(3)
    seeds = [ar1(4000, 0.95, rng)]  # one seed: only the windows are resampled
    lo1, hi1 = tb.time_block_interval(seeds, 1, n_boot=2000)  # iid windows
    lo50, hi50 = tb.time_block_interval(seeds, 50, n_boot=2000)  # blocks far longer than 1/(1-ρ)
    assert hi50 - lo50 > 2.0 * (hi1 - lo1)
    # the theory for ρ = 0.95: the long-run variance is (1+ρ)/(1−ρ) ≈ 39× the iid one, so ≈ 6× wider
    assert hi50 - lo50 < 12.0 * (hi1 - lo1)


def test_block_interval_matches_iid_on_an_uncorrelated_series():
    rng = np.random.default_rng(4)
    seeds = [rng.normal(size=4000)]
    w1 = np.subtract(*tb.time_block_interval(seeds, 1, n_boot=2000)[::-1])
    w50 = np.subtract(*tb.time_block_interval(seeds, 50, n_boot=2000)[::-1])
    assert 0.6 < w50 / w1 < 1.6


def test_paired_difference_cancels_a_shared_series():
    rng = np.random.default_rng(5)
    shared = [ar1(1000, 0.9, rng) for _ in range(3)]
    lo, hi = tb.paired_time_block_interval([s + 0.5 for s in shared], shared, 25, n_boot=500)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
