"""Synthetic sequences with known positional structure, and their ground truth (numpy only).

Four testbeds for the claim experiments (``pipelines/studies/claims``), each seeded and each with a
trivial reference (what a model that ignores positions and context scores) and the Bayes-optimal
reference (what the generating process itself scores), so that a model's gain over trivial can be
judged against the most there is to gain:

* :func:`copy_windows` — retrieval at distance d: token t repeats token t − d (with probability
  1 − noise); the signal is exactly d positions back (a long-range signal when d is large).
* :func:`periodic_windows` — a period-p token sequence: a random pattern of p tokens repeated, each
  token replaced by a uniform one with probability ``noise``; the Bayes predictor votes over the
  earlier cycles (:func:`periodic_bits`), so more context helps up to the window's end.
* :func:`two_period_windows` — two independent periodic streams (periods p₁ and p₂) read as one
  token a·V + b: a next-token predictor needs a vote over each period, two positional bands.
* :func:`motif_window` — DNA-like bases (0..3) with motif A and motif B planted at a spacing: label 1
  when B starts exactly ``distance`` bases after A ends, 0 otherwise (another spacing, or B before A
  at the same spacing); the planted pair is the only occurrence of either motif in the window.

Token windows are ``(n, length + 1)`` int64 arrays for a causal LM (inputs ``[:, :-1]``, next-token
targets ``[:, 1:]``). Losses are in bits per predicted token.
"""

from __future__ import annotations

import math

import numpy as np

from posenc import PosencError

BASES = 4  # motif windows use the DNA alphabet 0..3 (A, C, G, T)


def _check(name: str, ok: bool, got: object) -> None:
    if not ok:
        raise PosencError(f"synthetic data: {name} is out of range (got {got})")


def noisy_copy_entropy(vocab: int, noise: float) -> float:
    """Bits of a token that equals a known one with probability 1 − noise + noise/V, else uniform."""
    hit, miss = 1.0 - noise + noise / vocab, noise / vocab
    return -hit * math.log2(hit) - (vocab - 1) * (miss * math.log2(miss) if miss > 0 else 0.0)


# ----------------------------------------------------------------------------- retrieval (copy)
def copy_windows(
    n: int, length: int, vocab: int, distance: int, noise: float, rng: np.random.Generator
) -> np.ndarray:
    """``n`` windows (n, length + 1): tokens 0..d−1 uniform, then x[t] = x[t − d] with probability
    1 − ``noise``, else a uniform token (which may equal x[t − d])."""
    _check("vocab", vocab >= 2, vocab)
    _check("distance", 1 <= distance, distance)
    _check("noise", 0.0 <= noise < 1.0, noise)
    x = rng.integers(0, vocab, size=(n, length + 1))
    fresh = rng.random((n, length + 1)) < noise  # (n, T + 1): positions re-drawn
    for t in range(distance, length + 1):
        x[:, t] = np.where(fresh[:, t], x[:, t], x[:, t - distance])
    return x.astype(np.int64)


def copy_bits(length: int, vocab: int, distance: int, noise: float) -> dict[str, float]:
    """``{"trivial", "optimal"}`` bits per predicted token of windows of ``length`` targets.

    Trivial: log2 V (tokens are uniform marginally). Optimal: targets 1..d−1 have nothing to copy
    (log2 V), targets d..length the noisy-copy entropy."""
    blind = min(distance - 1, length)
    optimal = (blind * math.log2(vocab) + (length - blind) * noisy_copy_entropy(vocab, noise)) / length
    return {"trivial": math.log2(vocab), "optimal": optimal}


# ----------------------------------------------------------------------------- periodic tokens
def periodic_windows(
    n: int, length: int, vocab: int, period: int, noise: float, rng: np.random.Generator
) -> np.ndarray:
    """``n`` windows (n, length + 1): a uniform pattern of ``period`` tokens per window, repeated from
    a random phase, each token replaced by a uniform one with probability ``noise``."""
    _check("vocab", vocab >= 2, vocab)
    _check("period", period >= 1, period)
    _check("noise", 0.0 <= noise < 1.0, noise)
    pattern = rng.integers(0, vocab, size=(n, period))
    phase = rng.integers(0, period, size=(n, 1))
    idx = (np.arange(length + 1)[None, :] + phase) % period  # (n, T + 1)
    x = np.take_along_axis(pattern, idx, axis=1)
    fresh = rng.random(x.shape) < noise
    return np.where(fresh, rng.integers(0, vocab, size=x.shape), x).astype(np.int64)


def periodic_bits(windows: np.ndarray, vocab: int, period: int, noise: float) -> np.ndarray:
    """Exact Bayes-optimal bits of each target of ``windows`` (n, T + 1) → (n, T).

    The predictor knows the process: the pattern token of a phase is uniform a priori, and each
    earlier same-phase token is evidence for it (likelihood 1 − noise + noise/V if equal, noise/V
    if not); the predictive is the posterior-weighted mixture."""
    n, t1 = windows.shape
    hit, miss = 1.0 - noise + noise / vocab, noise / vocab
    log_ratio = math.log(hit) - math.log(miss) if noise > 0 else 1e9
    counts = np.zeros((n, period, vocab))  # same-phase token counts seen so far
    bits = np.zeros((n, t1 - 1))
    rows = np.arange(n)
    for t in range(t1):
        ph = t % period
        if t > 0:
            logit = counts[:, ph] * log_ratio  # (n, V): log posterior of each pattern token, up to a constant
            post = np.exp(logit - logit.max(axis=1, keepdims=True))
            post /= post.sum(axis=1, keepdims=True)
            x = windows[:, t]
            p = post[rows, x] * hit + (1.0 - post[rows, x]) * miss
            bits[:, t - 1] = -np.log2(p)
        counts[rows, ph, windows[:, t]] += 1
    return bits


# ----------------------------------------------------------------------------- two periods
def two_period_windows(
    n: int, length: int, vocab_each: int, periods: tuple[int, int], noise: float, rng: np.random.Generator
) -> np.ndarray:
    """``n`` windows (n, length + 1) of tokens a·V + b: ``a`` a period-``periods[0]`` and ``b`` an
    independent period-``periods[1]`` :func:`periodic_windows` stream, each over V = ``vocab_each``
    symbols with its own noise; the vocabulary is V². Predicting a token needs both periods: one
    band per component."""
    a = periodic_windows(n, length, vocab_each, periods[0], noise, rng)
    b = periodic_windows(n, length, vocab_each, periods[1], noise, rng)
    return (a * vocab_each + b).astype(np.int64)


def two_period_bits(
    windows: np.ndarray, vocab_each: int, periods: tuple[int, int], noise: float
) -> np.ndarray:
    """Exact Bayes-optimal bits of each target of :func:`two_period_windows` (n, T + 1) → (n, T):
    the components are independent, so the bits add (:func:`periodic_bits` of each)."""
    a, b = windows // vocab_each, windows % vocab_each
    return periodic_bits(a, vocab_each, periods[0], noise) + periodic_bits(b, vocab_each, periods[1], noise)


# ----------------------------------------------------------------------------- motif spacing
def find(seq: np.ndarray, motif: np.ndarray) -> np.ndarray:
    """Start indices of every occurrence of ``motif`` in ``seq``."""
    k = len(motif)
    if len(seq) < k:
        return np.zeros(0, dtype=np.int64)
    view = np.lib.stride_tricks.sliding_window_view(seq, k)  # (len − k + 1, k)
    return np.flatnonzero((view == motif).all(axis=1))


def motif_window(
    length: int,
    motif_a: np.ndarray,
    motif_b: np.ndarray,
    distance: int,
    negative: str,
    label_noise: float,
    rng: np.random.Generator,
    region: tuple[float, float] = (0.0, 1.0),
) -> tuple[np.ndarray, int]:
    """One window of ``length`` bases and its label (see the module docstring).

    Positive (label 1): B starts ``distance`` bases after A ends. Negative: ``negative="spacing"``
    — B after A at a spacing drawn uniformly from 0..2·distance other than ``distance``;
    ``negative="order"`` — B before A, A starting ``distance`` bases after B ends. The pair sits at a
    uniform position (its start within the ``region`` fraction of the possible starts); background
    bases are uniform and re-drawn until neither motif occurs anywhere else. The label is flipped
    with probability ``label_noise``."""
    _check("motifs", len(motif_a) > 0 and len(motif_b) > 0, (len(motif_a), len(motif_b)))
    _check("negative", negative in ("spacing", "order"), negative)
    _check("window length", length >= len(motif_a) + len(motif_b) + 2 * distance, length)
    positive = bool(rng.integers(0, 2))
    gap = distance
    if not positive and negative == "spacing":
        gap = int(rng.choice([g for g in range(2 * distance + 1) if g != distance]))
    first, second = (motif_b, motif_a) if not positive and negative == "order" else (motif_a, motif_b)
    span = len(first) + gap + len(second)
    lo, hi = (round(f * (length - span)) for f in region)  # the pair's possible starts
    start = int(rng.integers(lo, max(lo, hi) + 1))
    planted = np.zeros(length, dtype=bool)
    planted[start : start + len(first)] = planted[start + span - len(second) : start + span] = True
    seq = rng.integers(0, BASES, size=length)
    seq[start : start + len(first)] = first
    seq[start + span - len(second) : start + span] = second
    for _ in range(10_000):
        bad = (_covered(seq, motif_a) | _covered(seq, motif_b)) & ~planted
        if not bad.any():
            break
        seq[bad] = rng.integers(0, BASES, size=int(bad.sum()))
    else:
        raise PosencError("synthetic motif window: could not clear stray motif copies in 10,000 draws")
    if len(find(seq, motif_a)) != 1 or len(find(seq, motif_b)) != 1:
        raise PosencError("synthetic motif window: the two motifs overlap into a third copy; choose motifs "
                          "that cannot be read across their junction")
    label = int(positive) ^ int(rng.random() < label_noise)
    return seq.astype(np.int64), label


def _covered(seq: np.ndarray, motif: np.ndarray) -> np.ndarray:
    """Mask of the bases covered by any occurrence of ``motif``."""
    bad = np.zeros(len(seq), dtype=bool)
    for s in find(seq, motif):
        bad[s : s + len(motif)] = True
    return bad


def motif_accuracy(label_noise: float) -> dict[str, float]:
    """``{"trivial", "optimal"}`` accuracy: balanced labels (0.5), and 1 − label noise for the
    predictor that reads the planted spacing (it is always visible: only one copy of each motif)."""
    return {"trivial": 0.5, "optimal": 1.0 - label_noise}
