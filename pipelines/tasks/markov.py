"""Markov-chain baselines for DNA language modelling, fitted on the train region, and the callback
that logs them beside every run."""

from __future__ import annotations

import lightning as L
import numpy as np

from datamodules.dna.fasta import N_CODE


def _context_codes(seq: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """For each position t ≥ order: the base-4 code of seq[t-order:t] and the target seq[t],
    keeping only positions whose context and target contain no N."""
    seq = seq.astype(np.int64)
    n = len(seq) - order
    if n <= 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ctx = np.zeros(n, dtype=np.int64)
    bad = seq[order:] >= N_CODE
    for i in range(order):  # loop over context offsets (≤ order), vectorised over positions
        part = seq[i : i + n]
        bad |= part >= N_CODE
        ctx = ctx * 4 + np.minimum(part, 3)
    return ctx[~bad], seq[order:][~bad]


class MarkovModel:
    """Order-k Markov chain over A, C, G, T with add-α smoothing.

    Args:
        order: context length k (0 = base composition only).
        alpha: pseudo-count per (context, base).
    """

    def __init__(self, order: int, alpha: float = 1.0) -> None:
        if order < 0 or order > 12:
            raise ValueError(f"Markov order must be in 0..12, got {order}")
        self.order, self.alpha = order, alpha
        self.counts = np.zeros((4**order, 4), dtype=np.float64)

    def fit(self, segments: list[np.ndarray]) -> MarkovModel:
        for seg in segments:
            ctx, tgt = _context_codes(seg, self.order)
            np.add.at(self.counts, (ctx, tgt), 1.0)
        return self

    def bits_per_base(self, segments: list[np.ndarray]) -> float:
        """Mean −log2 p(base | context) over the scored positions of ``segments``."""
        probs = (self.counts + self.alpha) / (self.counts + self.alpha).sum(axis=1, keepdims=True)
        total, count = 0.0, 0
        for seg in segments:
            ctx, tgt = _context_codes(seg, self.order)
            total += float(-np.log2(probs[ctx, tgt]).sum())
            count += len(tgt)
        return total / max(count, 1)


class MarkovBaselines(L.Callback):
    """After testing, log the bits/base of order-k Markov chains fitted on the train region and
    scored on the test region, so a run says whether the Transformer learned anything.

    Args:
        orders: Markov orders to fit (0 = base composition).
    """

    def __init__(self, orders: list[int] = [0, 5]) -> None:  # noqa: B006 - jsonargparse default
        self.orders = list(orders)
        self.results: dict[int, float] = {}

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        if not getattr(trainer, "is_global_zero", True):  # DDP: computed and logged once, by rank 0
            return
        if dm is None or not hasattr(dm, "region_codes"):
            return
        train = dm.region_codes("train")
        test = dm.region_codes("test", dm.eval_span)  # the span the model was tested on
        for k in self.orders:
            self.results[k] = MarkovModel(k).fit(train).bits_per_base(test)
        for logger in trainer.loggers:
            logger.log_metrics({f"baseline/markov{k}_bits_per_base": v for k, v in self.results.items()})
