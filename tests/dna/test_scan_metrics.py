"""The scanning metrics (pipelines.eval.scan_metrics) against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.eval import scan_metrics as sm
from posenc import PosencError

nan = np.nan


def test_non_maximum_suppression():
    s = np.array([0.0, 5, 1, nan, 2, 9, 3, 3, 0, 4, 4, nan])
    idx, val = sm.peaks(s, radius=2)
    assert idx.tolist() == [5, 1, 9] and val.tolist() == [9, 5, 4]  # 9 removes 3..7; of the 4s the left
    assert sm.peaks(s, radius=0)[0].tolist() == [5, 1, 9, 10, 6, 7, 4, 2, 0, 8]
    assert sm.peaks(np.full(4, nan))[0].size == 0


def test_peak_offset_is_the_commonest_argmax_near_the_anchor():
    a = np.zeros(100)
    reads = [a.copy() for _ in range(4)]
    reads[0][53], reads[1][53], reads[2][47], reads[3][99] = 1, 1, 1, 1  # 99 is outside span 10 of 50
    assert sm.peak_offset(reads, [50, 50, 50, 50], span=10) == 3  # +3 twice, −3 once, 3: argmax at lo
    assert sm.peak_offset(reads[:3] + [np.full(100, nan)], [50, 50, 50, 50], span=10) == 3
    assert sm.peak_offset([reads[0], reads[2]], [50, 50], span=10) == -3  # a tie: nearest 0, then smallest
    assert sm.peak_offset([reads[0], reads[3], reads[3]], [50, 94, 94], span=10) == 5
    with pytest.raises(PosencError, match="offset is undefined"):
        sm.peak_offset([a], [-1])


def test_match_calls_best_first():
    t = sm.Target(anchor=100, targets=(100, 300), known=(500,))
    calls = np.array([104, 98, 295, 505, 700, 320])
    out, dist = sm.match(calls, t, tol=10)
    # 104 finds 100; 98 is near found 100: ignored; 295 finds 300; 505 near a known: ignored; 700 false;
    # 320 is 20 from 300: false
    assert out.tolist() == [1, -1, 1, -1, 0, 0] and dist.tolist() == [4, 5]
    assert sm.match(np.array([50]), sm.Target(-1, (), ()))[0].tolist() == [0]


def test_average_precision_by_hand():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    outcome = np.array([1, 0, -1, 1, 0])  # ignored calls drop out: hit, false, hit, false
    # precision at the hits: 1/1 and 2/3; three targets (one never reached)
    assert sm.average_precision(scores, outcome, 3) == pytest.approx((1 + 2 / 3) / 3)
    assert np.isnan(sm.average_precision(scores, outcome, 0))


def test_threshold_hit_share_and_false_calls():
    reads = [np.array([0, 0, 5, 0, 0, 0, 0, 0, 3, 0, 0, 0.0]),
             np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0.0])]
    targets = [sm.Target(2, (2,), ()), sm.Target(8, (8,), ())]
    per_window, calls = sm.collect(reads, targets, offset=0, radius=2, tol=1)
    # peaks: window 0: 2 (5, hit), 8 (3, false: 8 is window 1's target); window 1: 9 (1, hit), 0 (0,
    # false: the first of a flat run, nothing to its left); a flat run's later bases are no peaks
    thr = sm.best_threshold(calls)
    assert thr == 1.0  # calls >= 1: hits 2, false 1 → F1 0.8; >= 5: F1 2/3; >= 3: F1 2·1/(2+2) = 0.5
    assert sm.hit_share(per_window, targets, thr, tol=0) == 0.5  # window 1's call is 1 base off
    assert sm.hit_share(per_window, targets, thr, tol=1) == 1.0
    bg = [np.array([nan, 2, 0, 0, 0, 0, 0, 0, 1.5, 0, nan, nan])]  # 9 scored bases
    per_bg, _ = sm.collect(bg, [sm.Target(-1, (), ())], offset=0, radius=2)
    assert sm.false_per_kb(per_bg, bg, thr) == pytest.approx(1000 * 2 / 9)


def test_offset_moves_calls_back():
    reads = [np.eye(1, 50, 33)[0]]  # one peak at 33, answering a TSS at 30
    per_window, calls = sm.collect(reads, [sm.Target(30, (30,), ())], offset=3, radius=2, tol=0)
    assert per_window[0][0][0] == 30 and calls.outcome[0] == 1
