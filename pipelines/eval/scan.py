"""The scanning evaluation: read nested genome windows with every read, then score each read per length,
its offset and threshold chosen on the validation windows and read once on the test windows.

Reads (:mod:`pipelines.tasks.dna.scan_reads`): ``whole`` (one pass, token logits pooled as the classifier
pools a crop), ``whole_tokens`` (one pass, the raw token logits), ``sliding`` (the same classifier on
every training-length window), ``pwm`` and ``onehot_lr`` (fixed-window baselines slid the same way).
The sliding reads are computed once per promoter, on its longest window, and sliced for the shorter
windows nested in it; the one-pass reads read every window at its own length (that is the question).

Metrics (:mod:`pipelines.eval.scan_metrics`), per read and length: ``hit5``, ``hit10`` (share of the
test promoters with a call within ±5 / ±10 bases), ``auprc`` (of the calls in the test promoter
windows), ``false_per_kb`` (calls per kb of the test background windows), each call threshold and
peak offset chosen on the validation windows of that length.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datamodules.dna.scan_windows import ScanWindow
from pipelines.eval import scan_metrics as sm
from pipelines.tasks.dna.scan_reads import (
    conv_read,
    crop_weights,
    evaluable,
    pool_read,
    sliding_read,
    token_read,
)

ONE_PASS = ("whole", "whole_tokens")
SLID = ("sliding", "pwm", "onehot_lr")
READS = ONE_PASS + SLID


@dataclass
class Reads:
    """Per read and length, one per-base score (n,) per window (in the windows' order), and the seconds
    each read took (the sliding reads once, on the longest windows)."""

    scores: dict[str, dict[int, list[np.ndarray]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, read: str, length: int, score: np.ndarray) -> None:
        self.scores.setdefault(read, {}).setdefault(length, []).append(score)

    def clock(self, read: str, seconds: float) -> None:
        self.seconds[read] = self.seconds.get(read, 0.0) + seconds


def _timed(reads: Reads, name: str, fn: Callable[[], np.ndarray]) -> np.ndarray:
    t0 = time.perf_counter()
    out = fn()
    reads.clock(name, time.perf_counter() - t0)
    return out


def read_windows(model: Any, scorers: dict[str, Any], contigs: Sequence[np.ndarray],
                 windows: dict[int, list[ScanWindow]], width: int, tss_index: int,
                 progress: Callable[[int], object] | None = None, reads: Reads | None = None) -> Reads:
    """Every read of every window of ``windows`` (``{length: [nested windows]}``, parallel lists).

    Args:
        model: the classifier (``token_logits``, ``forward``; optionally ``pool_weights``), in eval mode.
        scorers: the slid baselines by read name (``pwm``, ``onehot_lr``): ``logits(x)`` over one-hot input.
        contigs: the genome's contigs as base codes.
        width: the training crop length in bases.
        tss_index: the TSS's index in a training crop.
        progress: called with the bases of each longest window read.
        reads: reads to add to (several window sets in one).
    """
    reads = reads or Reads()
    weights = crop_weights(model, width)
    lengths = sorted(windows, reverse=True)
    for j, outer in enumerate(windows[lengths[0]]):
        codes = outer.codes(contigs[outer.contig])
        slid = {"sliding": _timed(reads, "sliding", lambda c=codes: sliding_read(model, c, width, tss_index))}
        for name, scorer in scorers.items():
            slid[name] = _timed(reads, name, lambda c=codes, s=scorer: conv_read(s, c, tss_index))
        for n in lengths:
            w = windows[n][j]
            o, keep = w.inside(outer), evaluable(n, width, tss_index)
            for name, score in slid.items():
                part = np.full(n, np.nan)
                part[keep] = score[o : o + n][keep]
                reads.add(name, n, part)
            codes_n = w.codes(contigs[w.contig])
            logits = _timed(reads, "whole", lambda c=codes_n: token_read(model, c))
            reads.add("whole", n, pool_read(logits, weights, tss_index))
            raw = np.full(n, np.nan)
            raw[keep] = logits[keep]
            reads.add("whole_tokens", n, raw)
        if progress is not None:
            progress(outer.length)
    return reads


def targets_of(windows: Sequence[ScanWindow]) -> list[sm.Target]:
    return [sm.Target(w.anchor, w.targets, w.known) for w in windows]


def score_read(val: list[np.ndarray], val_windows: list[ScanWindow], test: list[np.ndarray],
               test_windows: list[ScanWindow], background: list[np.ndarray],
               background_windows: list[ScanWindow]) -> dict[str, float]:
    """One read at one length: offset and threshold chosen on ``val``, the metrics on ``test`` and
    ``background`` (see the module docstring)."""
    vt, tt, bt = targets_of(val_windows), targets_of(test_windows), targets_of(background_windows)
    offset = sm.peak_offset(val, [t.anchor for t in vt])
    _, val_calls = sm.collect(val, vt, offset)
    threshold = sm.best_threshold(val_calls)
    per_window, calls = sm.collect(test, tt, offset)
    per_bg, _ = sm.collect(background, bt, offset)
    return {"offset": offset, "threshold": threshold,
            "hit5": sm.hit_share(per_window, tt, threshold, 5),
            "hit10": sm.hit_share(per_window, tt, threshold, 10),
            "auprc": sm.average_precision(calls.scores, calls.outcome, calls.n_targets),
            "false_per_kb": sm.false_per_kb(per_bg, background, threshold),
            "windows": len(test), "targets": calls.n_targets, "background_kb": _kb(background)}


def _kb(reads: list[np.ndarray]) -> float:
    return sum(int((~np.isnan(r)).sum()) for r in reads) / 1000.0


def score_table(val: Reads, val_windows: dict[int, list[ScanWindow]], test: Reads,
                test_windows: dict[int, list[ScanWindow]], background: Reads,
                background_windows: dict[int, list[ScanWindow]]) -> list[dict[str, Any]]:
    """Rows ``{read, length, offset, threshold, hit5, hit10, auprc, false_per_kb, …}`` per read and
    length (every read in :data:`READS` that ``test`` has)."""
    rows = []
    for read in [r for r in READS if r in test.scores]:
        for n in sorted(test_windows):
            row = score_read(val.scores[read][n], val_windows[n], test.scores[read][n], test_windows[n],
                             background.scores[read][n], background_windows[n])
            rows.append({"read": read, "length": n, **row})
    return rows
