"""A DNA-like testbed with a helical (~10.5-bp) dinucleotide periodicity (claim 3, issue 39).

Nucleosome-positioning sequences carry AA/TT dinucleotides preferentially every 10–11 bp, in phase
with the helix's turn. :func:`helical_windows` plants that signal on an order-0 background: each
window gets a random phase φ, and at every position t where the helical wave
``cos(2π (t − φ) / period)`` is near its crest, with probability ``strength`` the two bases t, t+1 are
overwritten by AA or TT (equally likely). ``strength = 0`` is the control without the signal (the
background alone). Bases are 0..3 (A, C, G, T); windows are ``(n, length + 1)`` int64 for a causal LM.

:func:`aa_autocorrelation` is the float64 check of the planted signal: the excess, over the product
of the marginals, of "AA/TT at t and AA/TT at t + lag", which peaks near lag ``period`` when the
signal is there and is flat at 0 without it.
"""

from __future__ import annotations

import numpy as np

from posenc import PosencError

A, T = 0, 3
CREST = 0.8  # the wave's crest: positions with cos(·) above this get a planting chance (~20% of them)


def _check(name: str, ok: bool, got: object) -> None:
    if not ok:
        raise PosencError(f"helical synthetic data: {name} is out of range (got {got})")


def helical_windows(
    n: int,
    length: int,
    rng: np.random.Generator,
    period: float = 10.5,
    strength: float = 0.8,
    gc: float = 0.4,
) -> np.ndarray:
    """``n`` windows (n, length + 1) of bases with AA/TT planted at the helical crests.

    Args:
        n: windows.
        length: predicted positions per window (the window holds length + 1 bases).
        rng: the generator (seeded by the caller).
        period: the helical period in bases (10.5 for B-DNA).
        strength: the chance that a crest position gets an AA/TT dinucleotide (0: the control).
        gc: the background's G+C share (order-0: A=T=(1−gc)/2, C=G=gc/2).
    """
    _check("period", period > 2.0, period)
    _check("strength", 0.0 <= strength <= 1.0, strength)
    _check("gc", 0.0 < gc < 1.0, gc)
    _check("length", length >= 2, length)
    p = np.array([(1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2], dtype=np.float64)
    x = rng.choice(4, size=(n, length + 1), p=p)  # (n, T + 1) background
    phase = rng.uniform(0.0, period, size=(n, 1))  # (n, 1) one helix phase per window
    t = np.arange(length, dtype=np.float64)[None, :]  # (1, T) dinucleotide starts t, t+1 ≤ T
    crest = np.cos(2.0 * np.pi * (t - phase) / period) > CREST  # (n, T)
    plant = crest & (rng.random(crest.shape) < strength)  # (n, T)
    base = np.where(rng.random(crest.shape) < 0.5, A, T)  # (n, T) AA or TT
    rows, cols = np.nonzero(plant)
    x[rows, cols] = base[rows, cols]
    x[rows, cols + 1] = base[rows, cols]
    return x.astype(np.int64)


def aa_autocorrelation(x: np.ndarray, max_lag: int) -> np.ndarray:
    """(max_lag + 1,) float64 excess co-occurrence of AA/TT dinucleotides at lag 0..max_lag:
    ``P(d_t ∧ d_{t+lag}) − P(d)²`` with d_t = "bases t, t+1 are AA or TT", pooled over windows."""
    x = np.asarray(x)
    _check("max_lag", 1 <= max_lag < x.shape[1] - 1, max_lag)
    d = ((x[:, :-1] == x[:, 1:]) & ((x[:, :-1] == A) | (x[:, :-1] == T))).astype(np.float64)  # (n, T)
    mean = d.mean()
    out = np.empty(max_lag + 1, dtype=np.float64)
    for lag in range(max_lag + 1):
        out[lag] = (d[:, : d.shape[1] - lag] * d[:, lag:]).mean() - mean**2
    return out
