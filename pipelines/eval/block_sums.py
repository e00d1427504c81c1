"""Per-block sums of a length sweep: the metric's numerator and count summed over each bootstrap
block of the scored split (the DNA LMs: at most ``datamodules.dna.windows.MAX_BLOCKS`` contiguous
stretches of the test or validation region), so that ``pipelines.studies.bootstrap`` can resample test
regions as well as seeds (artifact ``blocks.csv``, :func:`pipelines.eval.report.write_blocks`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor

from pipelines.tasks.base import TaskAdapter


class BlockSums:
    """Per-block (numerator, count) of one loader's windows, from the block ids its dataset gives
    (``dataset.window_blocks``, aligned with the dataset's indices) in the order its sampler yields
    them (batches hold consecutive sampler indices)."""

    def __init__(self, loader: Any) -> None:
        ids = np.asarray(loader.dataset.window_blocks, dtype=np.int64)
        self.ids = ids[np.fromiter(iter(loader.sampler), dtype=np.int64)]  # (windows,) in loader order
        n = int(ids.max()) + 1 if ids.size else 0
        self.sums, self.counts, self.seen = np.zeros(n), np.zeros(n), 0

    def add(self, sums: Tensor, counts: Tensor) -> None:
        """Add one batch's per-window parts (B,)."""
        ids = self.ids[self.seen : self.seen + len(sums)]
        self.seen += len(sums)
        np.add.at(self.sums, ids, sums.double().numpy())
        np.add.at(self.counts, ids, counts.double().numpy())

    def table(self) -> np.ndarray | None:
        """(K, 2) rows of (numerator, count); ``None`` when a block scored nothing (windows left out
        as mostly N, or ``max_batches``): such a sweep has no block bootstrap."""
        if not self.counts.size or not (self.counts > 0).all():
            return None
        return np.column_stack([self.sums, self.counts])  # (K, 2)


def block_sums(adapter: TaskAdapter, loader: Any) -> BlockSums | None:
    """A :class:`BlockSums` where the adapter scores windows and the loader's dataset numbers blocks."""
    if not adapter.scores_windows or getattr(getattr(loader, "dataset", None), "window_blocks", None) is None:
        return None
    return BlockSums(loader)
