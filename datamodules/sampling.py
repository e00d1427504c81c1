"""Samplers that shard by rank themselves, so distributed (DDP) training and evaluation stay exact.

No Lightning imports. Lightning replaces the sampler of every loader it is given with a
``DistributedSampler`` unless the sampler already is one, and its replacement is wrong here twice:
for a ``RandomSampler(num_samples=…)`` it shuffles the *whole* dataset (every window of a genome,
``samples_per_epoch`` ignored), and for evaluation it pads the last shard with repeated items, so a
test metric is no longer that of the test region. Both samplers below are ``DistributedSampler``
subclasses (Lightning leaves them alone) that do the sharding themselves:

* :class:`EpochSampler` (training): each epoch draws one global, seeded list of indices — the same
  list whatever the number of processes — and rank ``r`` of ``W`` takes items ``r, r+W, r+2W, …``.
  Shards are disjoint and their union is what a single process trains on in that epoch.
* :class:`ShardSampler` (validation/test): rank ``r`` takes a contiguous block of ``range(n)``; the
  blocks partition the dataset, nothing is repeated or dropped (shards may differ by one item).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data.distributed import DistributedSampler

from posenc import PosencError


def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")


def draw_epoch(n: int, num_samples: int, seed: int, epoch: int) -> np.ndarray:
    """``num_samples`` indices of ``range(n)`` for one epoch, seeded by ``(seed, epoch)``.

    Distinct when ``num_samples ≤ n`` (sampling without replacement; numpy's ``choice`` does not
    build a permutation of a large ``n``); beyond ``n`` whole shuffled passes are concatenated, so
    no index occurs more than ``⌈num_samples / n⌉`` times.
    """
    if n < 1:
        raise PosencError("the training set is empty: nothing to sample")
    rng = np.random.default_rng([seed, epoch])
    parts, left = [], num_samples
    while left > 0:
        take = min(left, n)
        parts.append(rng.choice(n, size=take, replace=False) if take < n else rng.permutation(n))
        left -= take
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)


class EpochSampler(DistributedSampler):
    """Seeded training indices, a fresh draw each epoch, sharded across ranks.

    Args:
        n: dataset size.
        num_samples: indices per epoch over *all* ranks (``None``: every index once, shuffled).
        seed: seed; the epoch's draw depends on ``(seed, epoch)`` only.
        rank: this process's global rank.
        world_size: number of processes.

    Each rank gets ``num_samples // world_size`` indices (the remainder is not used that epoch), so
    every rank runs the same number of batches. ``set_epoch`` (called by Lightning) picks the draw.
    """

    def __init__(self, n: int, num_samples: int | None = None, seed: int = 0, rank: int = 0,
                 world_size: int = 1) -> None:  # no super().__init__: it needs a process group
        _check_rank(rank, world_size)
        self.n, self.total = int(n), int(n if num_samples is None else num_samples)
        if world_size > 1 and self.total < world_size:
            raise PosencError(f"{self.total} training samples per epoch cannot be shared by "
                              f"{world_size} processes: raise data.samples_per_epoch")
        self.seed, self.rank, self.num_replicas, self.epoch = int(seed), rank, world_size, 0
        self.shuffle, self.drop_last = True, True
        self.num_samples = self.total // world_size
        self.total_size = self.num_samples * world_size

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch."""
        every = draw_epoch(self.n, self.total, self.seed, self.epoch)  # (total,) the same on all ranks
        return every[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples


class ShardSampler(DistributedSampler):
    """In-order evaluation indices: rank ``r`` of ``W`` gets ``range(n)[r·n//W : (r+1)·n//W]``.

    Args:
        n: dataset size (under DDP at least ``world_size``, so every rank has something to score).
        rank: this process's global rank.
        world_size: number of processes.
        what: what the items are, for the error message.
    """

    def __init__(self, n: int, rank: int = 0, world_size: int = 1, what: str = "evaluation windows") -> None:
        _check_rank(rank, world_size)
        if world_size > 1 and n < world_size:
            raise PosencError(f"{n} {what} cannot be shared by {world_size} processes (each needs at "
                              f"least one): evaluate more data (data.eval_tokens) or use fewer devices")
        self.n, self.rank, self.num_replicas, self.epoch = int(n), rank, world_size, 0
        self.shuffle, self.drop_last, self.seed = False, False, 0
        self.start, self.stop = rank * self.n // world_size, (rank + 1) * self.n // world_size
        self.num_samples, self.total_size = self.stop - self.start, self.n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.stop))

    def __len__(self) -> int:
        return self.num_samples


def train_shard(trainer: Any) -> tuple[int, int]:
    """``(global rank, world size)`` of the trainer a datamodule is attached to, else ``(0, 1)``."""
    if trainer is None:
        return 0, 1
    return int(getattr(trainer, "global_rank", 0)), int(getattr(trainer, "world_size", 1))


def eval_shard(trainer: Any) -> tuple[int, int]:
    """``(rank, world size)`` for an evaluation loader: sharded only while the trainer itself
    validates or tests. Loaders asked for outside those loops (the after-fit length sweep of
    :class:`pipelines.eval.evaluate.ExtrapolationEval`, standalone evaluation) cover everything."""
    if trainer is None or not any(getattr(trainer, flag, False)
                                  for flag in ("testing", "validating", "sanity_checking")):
        return 0, 1
    return train_shard(trainer)


__all__ = ["EpochSampler", "ShardSampler", "draw_epoch", "eval_shard", "train_shard"]

