"""The comparison statistics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from pipelines.eval.statistics import (
    beats_baseline,
    estimate,
    retained_gain,
    retained_ratio,
)
from pipelines.studies.verdicts import paired_difference, sign_of


def test_estimate_matches_a_hand_computed_t_interval():
    # values 1, 2, 3: mean 2, s = 1; Student t with 2 degrees of freedom has the closed-form quantile
    # t_p = (2p − 1) / √(2p(1 − p)), so t(0.975, 2) = 0.95 / √0.04875; half-width = t·s/√3
    e = estimate([1.0, 2.0, 3.0])
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) / math.sqrt(3)
    assert (e.mean, e.std, e.n) == (2.0, 1.0, 3)
    assert e.lo == pytest.approx(2 - half, abs=1e-12) and e.hi == pytest.approx(2 + half, abs=1e-12)
    assert e.text(2) == f"2.00 ± {half:.2f}"


def test_one_value_has_no_interval():
    e = estimate([0.5])
    assert e.n == 1 and math.isnan(e.lo) and not e.excludes_zero and e.text() == "0.5000"


def test_paired_difference_uses_the_pairs_not_the_means():
    # large spread between seeds, constant difference: the paired interval is tight and called
    a, b = [1.0, 5.0, 9.0, 13.0], [1.1, 5.1, 9.1, 13.1]
    d = paired_difference(a, b)
    assert d.mean == pytest.approx(-0.1) and d.std == pytest.approx(0.0, abs=1e-12)
    # d = -0.1 ± 0 → lower-is-better metric: better (▲); higher-is-better: worse (▼)
    d = paired_difference([1.0, 5.0, 9.0, 13.0], [1.12, 5.08, 9.1, 13.1])  # diffs -0.12 -0.08 -0.1 -0.1
    assert d.hi < 0 and sign_of(d.lo, d.hi, higher_is_better=False) == 1
    assert sign_of(d.lo, d.hi, higher_is_better=True) == -1
    with pytest.raises(ValueError):
        paired_difference([1.0, 2.0], [1.0])


def test_a_difference_whose_interval_holds_zero_is_not_called():
    d = paired_difference([1.0, 2.0, 3.0], [1.5, 1.5, 2.5])  # diffs -0.5 0.5 0.5
    assert d.lo < 0 < d.hi and sign_of(d.lo, d.hi, False) == 0


def test_retained_gain_on_toy_numbers():
    # bits/base (lower is better): baseline 2.0, model 1.9 at L0 → gain 0.1
    assert retained_gain(1.9, 1.9, 2.0, False) == pytest.approx(1.0)
    assert retained_gain(1.95, 1.9, 2.0, False) == pytest.approx(0.5)
    assert retained_gain(2.0, 1.9, 2.0, False) == pytest.approx(0.0)
    assert retained_gain(2.05, 1.9, 2.0, False) == pytest.approx(-0.5)
    # AUROC (higher is better): baseline 0.5, model 0.8 at L0
    assert retained_gain(0.65, 0.8, 0.5, True) == pytest.approx(0.5)
    assert math.isnan(retained_gain(1.9, 2.1, 2.0, False))  # no gain at L0: undefined


def test_retained_ratio_stops_at_the_first_length_whose_lower_bound_drops():
    base = 2.0
    curves = {64: [1.90, 1.91, 1.89], 128: [1.901, 1.911, 1.891], 256: [1.95, 1.96, 1.94],
              512: [1.90, 1.91, 1.89]}
    best, per = retained_ratio(curves, 64, base, higher_is_better=False, retain=0.9)
    assert best == 128  # 256 keeps ~half the gain; 512 recovers but the run has ended
    assert per[256].mean == pytest.approx(0.5, abs=0.02)
    assert not beats_baseline([2.01, 1.99, 2.0], base, False)  # no margin at L0
    assert retained_ratio({64: [2.01, 1.99, 2.0], 128: [2.0, 2.0, 2.0]}, 64, base, False) == (None, {})
