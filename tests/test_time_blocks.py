"""Seed × time-block bootstrap of the forecasting claims (issue 39), float64, through the path the
length sweep takes: the datamodule numbers each test window's block (``windows.time_block``: window i
in block i // n, tests/ts/test_ts_model.py), the sweep sums errors per block, and
:class:`pipelines.studies.bootstrap.Resampler` draws seeds × blocks. On a correlated series the block
interval is wider than the window-by-window (iid) one; on an uncorrelated one it is not."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.studies.bootstrap import Arm, Resampler, percentile_interval


def ar1(n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """A stationary AR(1) series of length n (unit innovation variance)."""
    x = np.empty(n, dtype=np.float64)
    x[0] = rng.normal() / np.sqrt(1.0 - rho**2)
    eps = rng.normal(size=n)
    for t in range(1, n):
        x[t] = rho * x[t - 1] + eps[t]
    return x


def blocks(losses: np.ndarray, n: int) -> np.ndarray:
    """(K, 2) per-block (loss sum, window count), window i in block i // n: the sweep's table."""
    ids = np.arange(len(losses)) // n
    return np.column_stack([np.bincount(ids, losses), np.bincount(ids).astype(np.float64)])


def interval(per_seed: list[np.ndarray], n: int, boot: int = 2000) -> tuple[float, float]:
    arm = Arm.from_blocks([blocks(x, n) for x in per_seed])
    return percentile_interval(Resampler(arm.n_seeds, arm.n_blocks, boot, 0).metric(arm), 0.95)


def test_block_interval_is_wider_than_iid_on_an_ar1_series():
    seeds = [ar1(4000, 0.95, np.random.default_rng(3))]  # one seed: only the windows are resampled
    lo1, hi1 = interval(seeds, 1)  # iid windows
    lo50, hi50 = interval(seeds, 50)  # blocks far longer than 1/(1-ρ)
    assert hi50 - lo50 > 2.0 * (hi1 - lo1)
    # the theory for ρ = 0.95: the long-run variance is (1+ρ)/(1−ρ) ≈ 39× the iid one, so ≈ 6× wider
    assert hi50 - lo50 < 12.0 * (hi1 - lo1)


def test_block_interval_matches_iid_on_an_uncorrelated_series():
    seeds = [np.random.default_rng(4).normal(size=4000)]
    w1, w50 = (np.subtract(*interval(seeds, n)[::-1]) for n in (1, 50))
    assert 0.6 < w50 / w1 < 1.6


def test_paired_difference_cancels_a_shared_series():
    rng = np.random.default_rng(5)
    shared = [ar1(1000, 0.9, rng) for _ in range(3)]
    a = Arm.from_blocks([blocks(s + 0.5, 25) for s in shared])
    b = Arm.from_blocks([blocks(s, 25) for s in shared])
    res = Resampler(3, a.n_blocks, 500, 0)  # one set of draws for both arms: paired
    lo, hi = percentile_interval(res.metric(a) - res.metric(b), 0.95)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
