"""Time-block bootstrap for the time-series claims (3c, 4b; issue 39).

The forecasters score a test split as a sequence of windows in time order; neighbouring windows share
most of their history, so their losses are correlated and an interval over seeds alone (or one that
resamples windows one by one) is too narrow. Here the windows are cut into contiguous blocks of a
declared length (e.g. one week of windows), each block kept whole as one (loss sum, window count)
row, and :class:`pipelines.eval.bootstrap.Resampler` draws seeds × blocks exactly as it does for the
DNA LM's test stretches: no second bootstrap is written.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipelines.eval.bootstrap import BOOT_SEED, N_BOOT, Arm, Resampler, percentile_interval


def time_block_table(losses: Sequence[float], block_len: int) -> np.ndarray:
    """(K, 2) rows of (loss sum, window count) over contiguous blocks of ``block_len`` windows, in
    time order; the last block holds the remainder (fewer windows, never dropped)."""
    x = np.asarray(losses, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"time blocks need a non-empty 1-d series of window losses, got shape {x.shape}")
    if int(block_len) < 1:
        raise ValueError(f"time-block length must be ≥ 1 window, got {block_len}")
    starts = np.arange(0, x.size, int(block_len))  # (K,) first window of each block
    sums = np.add.reduceat(x, starts)  # (K,)
    counts = np.diff(np.append(starts, x.size)).astype(np.float64)  # (K,)
    return np.column_stack([sums, counts])  # (K, 2)


def time_block_arm(per_seed_losses: Sequence[Sequence[float]], block_len: int) -> Arm:
    """An :class:`Arm` of S seeds × K time blocks from each seed's window losses in time order (every
    seed scores the same test windows, so their block cuts coincide)."""
    tables = [time_block_table(row, block_len) for row in per_seed_losses]
    if len({t.shape[0] for t in tables}) != 1:
        raise ValueError("every seed must score the same number of test windows")
    return Arm.from_blocks(tables)


def time_block_interval(
    per_seed_losses: Sequence[Sequence[float]],
    block_len: int,
    level: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = BOOT_SEED,
) -> tuple[float, float]:
    """The ``level`` seed × time-block percentile interval of the mean window loss."""
    arm = time_block_arm(per_seed_losses, block_len)
    return percentile_interval(Resampler(arm.n_seeds, arm.n_blocks, n_boot, seed).metric(arm), level)


def paired_time_block_interval(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    block_len: int,
    level: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = BOOT_SEED,
) -> tuple[float, float]:
    """The ``level`` interval of mean loss a − b, both arms resampled with the same seed and block
    draws (paired), as the claims' primary differences are."""
    arm_a, arm_b = time_block_arm(a, block_len), time_block_arm(b, block_len)
    if (arm_a.n_seeds, arm_a.n_blocks) != (arm_b.n_seeds, arm_b.n_blocks):
        raise ValueError("paired arms need the same seeds and test windows")
    res = Resampler(arm_a.n_seeds, arm_a.n_blocks, n_boot, seed)
    return percentile_interval(res.metric(arm_a) - res.metric(arm_b), level)
