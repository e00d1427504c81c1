"""The interpolated Markov-chain baseline: order selection, leave-one-out smoothing, window scoring."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.tasks.dna.markov import InterpolatedMarkov, MarkovModel


def markov_sequence(order: int, n: int, seed: int, sharpness: float = 0.3) -> np.ndarray:
    """Bases 0..3 from a random order-``order`` chain (transition rows ~ Dirichlet(sharpness))."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet([sharpness] * 4, size=4**order)  # (4^k, 4)
    cum = table.cumsum(1)
    u = rng.random(n)
    seq = np.zeros(n, dtype=np.uint8)
    seq[:order] = rng.integers(0, 4, order)
    ctx = 0
    for i in range(order):
        ctx = ctx * 4 + int(seq[i])
    for t in range(order, n):
        b = int(np.searchsorted(cum[ctx], u[t]))
        seq[t] = min(b, 3)
        ctx = (ctx * 4 + seq[t]) % 4**order
    return seq


def test_selects_the_order_of_a_known_order3_chain():
    seq = markov_sequence(3, 120_000, seed=1)
    train, val = seq[:90_000], seq[90_000:]
    chain = InterpolatedMarkov(12).fit([train])
    order, scores = chain.select_order([val])
    assert order == 3
    assert chain.order == 3
    assert scores[3] < scores[2] - 0.05  # order 2 misses real structure
    assert scores[12] < scores[0]  # high orders degrade gracefully, never below composition
    # add-α falls apart at high orders: already at 10 (4^10 contexts, 90 kb: 1.39 bits), which costs
    # 0.15 CPU s where order 12's dense (4^12, 4) table costs 3.5 s (and 0.5 GB)
    add_alpha = MarkovModel(10, alpha=1.0).fit([train]).bits_per_base([val])
    assert add_alpha > scores[12] + 0.2


def test_order0_is_base_composition_and_unseen_contexts_back_off():
    rng = np.random.default_rng(0)
    seq = rng.choice(4, size=40_000, p=[0.4, 0.1, 0.1, 0.4]).astype(np.uint8)
    chain = InterpolatedMarkov(4).fit([seq])
    entropy = -sum(p * math.log2(p) for p in (0.4, 0.1, 0.1, 0.4))
    assert chain.bits_per_base([seq], order=0) == pytest.approx(entropy, abs=0.01)
    # a context never seen in training gets the lower order's prediction, not a uniform guess
    only_a = np.zeros(2000, dtype=np.uint8)
    lone = InterpolatedMarkov(3).fit([only_a])
    probe = np.array([1, 2, 3, 0], dtype=np.uint8)  # context CGT was never seen; target A
    p = lone.position_probs(probe, order=3)
    assert p[3] == pytest.approx(lone.position_probs(np.array([0], dtype=np.uint8), order=0)[0])


def test_leave_one_out_prefers_backing_off_on_iid_data():
    seq = np.random.default_rng(2).integers(0, 4, 50_000).astype(np.uint8)
    chain = InterpolatedMarkov(6).fit([seq])
    assert chain.betas[6] >= 256  # an i.i.d. source: high orders lean on order 0
    assert chain.bits_per_base([seq[:5000]], order=6) == pytest.approx(2.0, abs=0.02)


def brute_force(chain: InterpolatedMarkov, seq: np.ndarray, order: int, window: int) -> float:
    """Score windows of window + 1 bases at stride window one by one (the model's test windows)."""
    bits = []
    for start in range(0, len(seq) - window, window):
        win = seq[start : start + window + 1]
        p = chain.position_probs(win, order=order)  # context never leaves the window
        bits.extend(-np.log2(p[1:]))
    return float(np.mean(bits))


def test_window_scoring_matches_scoring_each_window():
    seq = markov_sequence(2, 20_000, seed=3)
    chain = InterpolatedMarkov(5).fit([seq[:15_000]])
    test = seq[15_000 : 15_000 + 8 * 64 + 1]
    for window in (8, 64):
        assert chain.bits_per_base([test], order=5, window=window) == pytest.approx(
            brute_force(chain, test, 5, window), rel=1e-12)
    # contiguous scoring: every base sees all the bases before it (up to the order)
    full = chain.position_probs(test, order=5)
    assert chain.bits_per_base([test], order=5) == pytest.approx(float(-np.log2(full).mean()), rel=1e-12)


def test_every_window_length_in_one_pass_matches_scoring_each_window():
    seq = markov_sequence(3, 30_000, seed=4)
    seq[[15_100, 15_333, 17_000]] = 4  # N bases break contexts inside windows
    chain = InterpolatedMarkov(6).fit([seq[:15_000]])
    test = [seq[15_000 : 15_000 + 16 * 128 + 1], seq[20_000:20_050]]  # the second: shorter than 64
    windows = [4, 16, 64, 128]
    for order in (0, 3, 6):
        fast = chain.bits_by_window(test, windows, order=order)
        for w in windows:
            bits = []  # each window of w + 1 bases scored alone, its first base context only
            for seg in test:
                for start in range(0, len(seg) - w, w):
                    p = chain.position_probs(seg[start : start + w + 1], order=order)[1:]
                    bits.extend(-np.log2(p[np.isfinite(p)]))  # an N target is never scored
            assert fast[w] == pytest.approx(float(np.mean(bits)), rel=1e-12)


def test_dense_count_tables_give_the_sparse_tables_numbers():
    seq = markov_sequence(3, 20_000, seed=5)
    chain = InterpolatedMarkov(6).fit([seq[:15_000]])
    dense = chain.level_probs(seq[15_000:])  # orders ≤ DENSE_MAX_ORDER read dense copies
    chain.DENSE_MAX_ORDER, chain._dense = -1, []  # every order through the sorted search
    sparse = chain.level_probs(seq[15_000:])
    np.testing.assert_array_equal(dense, sparse)


def test_n_breaks_contexts_and_is_never_scored():
    seq = np.array([0, 1, 4, 2, 3, 0, 1, 2], dtype=np.uint8)
    chain = InterpolatedMarkov(2).fit([seq])
    assert chain.tables[2][1].sum() == 3  # (2,3→0), (3,0→1), (0,1→2): none spans the N
    p = chain.level_probs(seq, order=2)
    assert np.isnan(p[:, 2]).all() and np.isfinite(p[:, 3]).all()
    # base 3 follows the N: only order 0 is usable there, whatever order is asked for
    assert p[2, 3] == p[0, 3]


def test_bad_orders_are_refused():
    with pytest.raises(ValueError, match="0..12"):
        InterpolatedMarkov(13)
    chain = InterpolatedMarkov(2).fit([np.zeros(10, dtype=np.uint8)])
    with pytest.raises(ValueError, match="not fitted"):
        chain.position_probs(np.zeros(5, dtype=np.uint8), order=3)
