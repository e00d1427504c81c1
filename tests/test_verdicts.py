"""Holm, the seed × block bootstrap, three-way verdicts, the gate and the guarded retained gain, against
values worked by hand and synthetic data with a known truth (seeded; tolerances are statistical, not
timings)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.eval.statistics import min_effect, point_guard
from pipelines.studies.bootstrap import Arm, Resampler, p_value, percentile_interval
from pipelines.studies.claims.gates import gate_reason
from pipelines.studies.claims.judge import three_way
from pipelines.studies.verdicts import (
    Call,
    PairedStat,
    gain,
    guard,
    holm,
    holm_calls,
    paired,
    power,
    retained,
)


def test_holm_matches_a_hand_worked_example():
    # p = 0.01, 0.04, 0.03, 0.005 (m = 4). Sorted: 0.005, 0.01, 0.03, 0.04 scaled by 4, 3, 2, 1:
    # 0.02, 0.03, 0.06, 0.04 → running maximum 0.02, 0.03, 0.06, 0.06; back in input order:
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # at α = 0.05 Holm rejects the two smallest and stops at 0.03 > 0.05 / 2
    assert [p < 0.05 for p in adjusted] == [True, False, False, True]


def test_holm_is_monotone_never_below_raw_capped_and_skips_nan():
    raw = np.random.default_rng(3).uniform(0, 0.2, 25)
    adj = np.array(holm(raw))
    assert (adj >= raw).all() and (adj <= 1).all()
    order = np.argsort(raw)
    assert (np.diff(adj[order]) >= 0).all()  # same order as the raw p-values
    assert holm([0.9, 0.8]) == [1.0, 1.0]  # capped at 1
    out = holm([0.01, math.nan, 0.02])  # NaN: not a comparison, m = 2
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)


def test_percentile_bootstrap_covers_the_mean_of_normal_samples():
    # 200 seeded normal samples of 40: the 95 % interval should hold the true mean ~95 % of the time;
    # the binomial sd of the hit rate over 200 trials is ~1.5 %, so 88–99 % is a wide, honest band.
    rng = np.random.default_rng(11)
    hits = 0
    for i in range(200):
        x = rng.normal(3.0, 2.0, 40)
        lo, hi = percentile_interval(Resampler(len(x), 1, 2000, seed=i).mean(x), 0.95)  # iid resampling
        hits += lo <= 3.0 <= hi
    assert 0.88 <= hits / 200 <= 0.99


def test_p_value_inverts_the_percentile_interval():
    reps = np.random.default_rng(0).normal(0.5, 0.2, 5000)
    lo, hi = percentile_interval(reps, 0.95)
    assert lo > 0 and p_value(reps) < 0.05  # interval excludes 0 ↔ p < 0.05
    lo, hi = percentile_interval(reps, 0.999)
    assert lo < 0 and p_value(reps) > 0.001
    assert p_value(np.zeros(10)) == 1.0


def test_block_bootstrap_keeps_blocks_whole():
    # block k has count c_k and a per-base value v_k: each replicate must be the count-weighted mean
    # of a multiset of K whole blocks, i.e. Σ w_k c_k v_k / Σ w_k c_k with integer w summing to K.
    K = 7
    counts = np.arange(1, K + 1, dtype=float) * 10
    values = np.arange(K, dtype=float) ** 2
    arm = Arm((counts * values)[None, :], counts[None, :])  # one seed
    rs = Resampler(1, K, n_boot=500, seed=2)
    w = rs.block_w
    assert (w == np.round(w)).all() and (w.sum(axis=1) == K).all()
    expected = (w @ (counts * values)) / (w @ counts)
    assert np.allclose(rs.metric(arm), expected)
    assert (w == K).any(axis=1).sum() < 5  # whole blocks are drawn, not one block over and over
    assert np.isclose(arm.values()[0], (counts * values).sum() / counts.sum())


def test_paired_blocks_share_draws_and_cancel_a_shared_block_effect():
    # two arms on the same blocks: large block-to-block spread shared by both, a constant offset of
    # 0.01 between them. Paired resampling cancels the spread; the interval is tight around 0.01.
    rng = np.random.default_rng(5)
    S, K = 5, 40
    counts = np.full((S, K), 500.0)
    block = rng.normal(2.0, 0.3, K)
    a = Arm((block + 0.01 + rng.normal(0, 1e-4, (S, K))) * counts, counts)
    b = Arm((block + rng.normal(0, 1e-4, (S, K))) * counts, counts)
    d = paired(a, b, n_boot=2000)
    lo, hi = d.interval()
    assert d.replicates is not None and "block" in d.method
    assert lo > 0.009 and hi < 0.011 and d.p < 0.01


def test_interval_is_the_union_of_t_and_bootstrap():
    stat = PairedStat(np.array([1.0, 2.0, 3.0]), np.array([-5.0, 0.5, 9.0] * 100), 4)
    lo, hi = stat.interval(0.95)
    t = 0.95 / math.sqrt(2 * 0.975 * 0.025) / math.sqrt(3)  # t(0.975, 2)·s/√n with s = 1
    assert lo == pytest.approx(-5.0) and hi == pytest.approx(9.0)
    assert PairedStat(np.array([1.0, 2.0, 3.0])).interval(0.95) == pytest.approx((2 - t, 2 + t))
    assert stat.p == pytest.approx(2 * 101 / 301)  # the larger: the bootstrap's (t's is 0.074)


def test_holm_calls_read_the_interval_and_correct_for_the_family():
    # one clear difference among five nulls: called; the same p alone is called, and a p that
    # passes alone (0.03) does not survive five comparisons
    sure = PairedStat(np.array([-0.10, -0.11, -0.09, -0.10, -0.105]))
    weak = PairedStat(np.array([-0.02, -0.05, 0.00, -0.03, -0.04]))  # t = 3.25, p = 0.031
    assert weak.p < 0.05
    nulls = {f"null{i}": PairedStat(np.random.default_rng(i).normal(0, 1, 5)) for i in range(4)}
    calls = holm_calls({"sure": sure, "weak": weak, **nulls, "missing": None}, higher_is_better=False)
    assert calls["sure"].sign == 1 and calls["sure"].hi < 0  # lower is better: a negative Δ is better
    assert calls["sure"].p_adj >= calls["sure"].p and calls["sure"].m == 6
    assert calls["weak"].sign == 0 and calls["weak"].p_adj > 0.05
    assert calls["missing"].sign == 0 and calls["missing"].text() == "undefined"
    alone = holm_calls({"weak": weak}, higher_is_better=False)["weak"]
    assert alone.sign == 1 and alone.level == pytest.approx(0.95)
    worse = holm_calls({"x": sure}, higher_is_better=True)["x"]
    assert worse.sign == -1  # the same interval is worse when higher is better


def _call(lo: float, hi: float, sign: int) -> Call:
    """A made-up primary call of a − b: its Holm-level interval and the call (+1 a better)."""
    stat = PairedStat(np.array([lo, hi]))
    return Call("a − b", stat, 0.5, 0.5, 0.95, lo, hi, sign, 1)


@pytest.mark.parametrize(("lo", "hi", "sign", "expect", "verdict", "why"), [
    (0.06, 0.30, 1, "better", "yes", "expected direction, clear of ±0.05"),  # called better, past the margin
    (0.05, 0.30, 1, "better", "yes", "clear of ±0.05"),  # boundary: exactly the margin clears it
    (0.02, 0.30, 1, "better", "inconclusive", "reaches inside ±0.05"),  # called, not shown to matter
    (-0.30, -0.02, -1, "better", "no", "opposite direction is called"),  # called worse
    (-0.04, 0.05, 0, "better", "no", "lies within ±0.05"),  # not called, inside the margin
    (-0.05, 0.05, 0, "better", "no", "lies within ±0.05"),  # boundary: exactly the margin is inside
    (-0.05, 0.0501, 0, "better", "inconclusive", "reaches past ±0.05"),  # just past it
    (-0.54, 0.74, 0, "better", "inconclusive", "neither an effect nor its absence"),  # claim 2's case
    (-0.30, -0.06, -1, "worse", "yes", "expected direction"),
    (0.035, 0.0765, -1, "worse", "inconclusive", "reaches inside ±0.05"),  # claim 20's old "yes"
    (0.02, 0.30, 1, "worse", "no", "opposite direction"),
    (-0.30, -0.06, -1, "differ", "yes", "expected direction"),
    (-0.01, 0.01, 0, "differ", "no", "lies within"),
    (math.nan, math.nan, 0, "better", "inconclusive", "undefined"),
])
def test_three_way_verdict_on_made_up_calls(lo, hi, sign, expect, verdict, why):
    got, reason = three_way(_call(lo, hi, sign), expect, 0.05)
    assert got == verdict and why in reason
    assert three_way(None, expect, 0.05)[0] == "inconclusive"


def test_three_way_refuses_an_unknown_expectation():
    with pytest.raises(ValueError, match="expect"):
        three_way(_call(0.1, 0.2, 1), "up", 0.05)


def test_gate_reads_the_lower_bound_of_the_gain_and_the_width_of_the_primary():
    t2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # t(0.975, 2)
    s = 0.01 * math.sqrt(3) / t2  # sd giving a 95 % half-width of exactly 0.01 with three seeds
    g = PairedStat(np.array([0.2 - s, 0.2, 0.2 + s]))  # gain 0.2 [0.19, 0.21]
    assert g.interval()[0] == pytest.approx(0.19)
    assert gate_reason(g, 0.19 - 1e-9, g, 0.02 + 1e-9) == ""  # both at their boundary: passes
    assert "lower bound below 0.191" in gate_reason(g, 0.191, g, 1.0, name="rope")
    assert "the gain of rope over the control" in gate_reason(g, 0.191, g, 1.0, name="rope")
    assert "wider than 0.0199" in gate_reason(g, 0.0, g, 0.0199)
    assert gate_reason(None, 0.5, g, 1.0) == ""  # no control declared: the width alone
    nan = PairedStat(np.array([0.3]))  # one seed: no interval — never passes
    assert gate_reason(nan, 0.0, g, 1.0) and gate_reason(g, 0.0, nan, 1.0)
    assert power(g) == pytest.approx(20.0)


def test_gain_over_the_trivial_baseline_has_the_right_sign():
    model, trivial = Arm.from_values([1.9, 1.91, 1.89]), Arm.from_values([2.0, 2.0, 2.0])
    assert gain(model, trivial, higher_is_better=False).mean == pytest.approx(0.1)
    auroc, chance = Arm.from_values([0.8, 0.82, 0.78]), Arm.from_values([0.5] * 3)
    assert gain(auroc, chance, higher_is_better=True).mean == pytest.approx(0.3)


def test_retained_gain_is_undefined_below_the_guard():
    trivial = Arm.from_values([2.0] * 5)
    small = Arm.from_values([1.995, 1.994, 1.996, 1.995, 1.995])  # gain 0.005 < 0.01 bits/base
    r = retained(small, small, trivial, trivial, False, "bits_per_base")
    assert not r.defined and "minimum effect 0.01" in r.why and math.isnan(r.mean)
    noisy = Arm.from_values([1.9, 2.1, 1.95, 2.05, 1.92])  # mean gain > 0.01, lower bound < 0
    assert not retained(noisy, noisy, trivial, trivial, False, "bits_per_base").defined
    assert min_effect("mse", 2.0e5) == pytest.approx(2.0e3)  # no absolute floor: 1 % of the baseline
    assert guard(PairedStat(np.array([0.1])), "acc", 0.5).startswith("no interval")


def test_one_run_guard_needs_a_gain_above_zero_and_the_minimum_effect():
    assert point_guard(0.02, "bits_per_base", 2.0) == ""
    assert "minimum effect 0.01" in point_guard(0.01, "bits_per_base", 2.0)  # not above the floor
    assert "≤ max(0" in point_guard(-0.3, "acc", 0.5)
    assert point_guard(30.0, "mse", 2.0e3) == "" and point_guard(19.0, "mse", 2.0e3) != ""  # 1 % of 2,000
    assert point_guard(math.nan, "acc", 0.5).startswith("no gain at L₀")


def test_retained_gain_interval_contains_the_true_ratio():
    # truth: gain 0.10 at L0 and 0.06 at L (ratio 0.6) over an order-0 baseline, per block; seeds add
    # noise to both, blocks differ in difficulty for the model and the baseline alike
    rng = np.random.default_rng(7)
    S, K = 5, 48
    counts = rng.integers(800, 1200, (S, K)).astype(float)
    counts[:] = counts[0]  # the same test blocks for every seed
    hard = rng.normal(0, 0.2, K)
    base = np.tile(2.0 + hard, (S, 1))
    at_l0 = base - 0.10 + rng.normal(0, 0.004, (S, K)) + rng.normal(0, 0.002, (S, 1))
    at_l = base - 0.06 + rng.normal(0, 0.004, (S, K)) + rng.normal(0, 0.002, (S, 1))
    arm = lambda x: Arm(x * counts, counts)  # noqa: E731
    r = retained(arm(at_l), arm(at_l0), arm(base), arm(base), False, "bits_per_base", n_boot=3000)
    assert r.defined and r.lo <= 0.6 <= r.hi and r.mean == pytest.approx(0.6, abs=0.03)
    assert r.hi - r.lo < 0.1
