"""Scoring a per-base read of scanning windows: peaks, calls, TSS localisation, false calls (numpy only).

A *read* gives every base of a window a score (NaN where it gives none). Its *peaks* are the bases left
by non-maximum suppression: highest score first, each peak removes every base within ``radius`` of it.
A read's peak sits at a fixed offset from the TSS it answers to (a classifier scored at its window's TSS
index has offset 0; a per-base readout may anchor elsewhere): the offset is chosen on validation windows
as the most common position of a window's highest score within ``span`` bases of its TSS, and every peak
is moved back by it before it is compared with a TSS.

Matching a read's calls (peaks at or above a threshold) with a window's TSSs, best call first: a call
within ``tol`` bases of a target TSS not yet matched is a hit; one near a TSS of another set (``known``)
or a matched target is ignored; any other is a false call.

* ``auprc``: average precision of the calls over every threshold (every peak a call), recall counted
  over all targets of the windows (a target no peak reaches keeps recall below 1);
* ``hit5`` / ``hit10``: share of the windows' own promoters (``anchor``) with a call within ±5 / ±10;
* ``false_per_kb``: false calls per 1,000 scored bases of the background windows;

the last two at the threshold that maximises F1 (hits within ``tol``) on the validation windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipelines.tasks.dna.scan_reads import NMS_RADIUS, peaks
from posenc import PosencError

TOL = 10  # bases: a call this close to a TSS finds it (the wider of the two localisation tolerances)
SPAN = 40  # bases either side of a TSS searched for the read's peak offset


@dataclass(frozen=True)
class Target:
    """What a window holds: its own promoter's TSS (``anchor``, -1: none), every TSS to find
    (``targets``) and the TSSs to ignore (``known``), as indices of the read."""

    anchor: int
    targets: tuple[int, ...]
    known: tuple[int, ...]


def peak_offset(scores: Sequence[np.ndarray], anchors: Sequence[int], span: int = SPAN) -> int:
    """The most common (on ties the nearest to 0, then the smallest) position of each window's highest
    score within ``span`` bases of its anchor TSS, relative to the anchor; windows without an anchor or
    a score near it are skipped."""
    found = []
    for s, a in zip(scores, anchors, strict=True):
        if a < 0:
            continue
        lo = max(0, a - span)
        part = np.asarray(s[lo : a + span + 1], dtype=np.float64)
        if np.isnan(part).all():
            continue
        found.append(int(np.nanargmax(part)) + lo - a)
    if not found:
        raise PosencError("no validation window with a score near its TSS: the peak offset is undefined")
    values, counts = np.unique(found, return_counts=True)
    best = values[counts == counts.max()]
    return int(best[np.lexsort((best, np.abs(best)))][0])


def match(calls: np.ndarray, target: Target, tol: int = TOL) -> tuple[np.ndarray, np.ndarray]:
    """Label the calls (indices, best first) of one window: (outcome per call: 1 hit, 0 false, -1
    ignored; the distance from each target to its matching call, ``inf`` if none)."""
    targets = np.asarray(target.targets, dtype=np.int64)
    known = np.asarray(target.known, dtype=np.int64)
    outcome = np.zeros(len(calls), dtype=np.int64)
    dist = np.full(len(targets), np.inf)
    for j, c in enumerate(np.asarray(calls, dtype=np.int64).tolist()):
        gap = np.abs(targets - c).astype(np.float64)
        gap[~np.isinf(dist)] = np.inf  # a target is found once
        if len(gap) and gap.min() <= tol:
            k = int(gap.argmin())
            dist[k], outcome[j] = gap[k], 1
        elif _near(targets, c, tol) or _near(known, c, tol):
            outcome[j] = -1
    return outcome, dist


def _near(sites: np.ndarray, c: int, tol: int) -> bool:
    return bool(len(sites)) and bool(np.abs(sites - c).min() <= tol)


def average_precision(call_scores: np.ndarray, outcome: np.ndarray, n_targets: int) -> float:
    """Average precision of calls (scores, outcome 1 hit / 0 false / -1 ignored) over every threshold:
    the sum over hits, best first, of precision there, divided by ``n_targets``."""
    keep = outcome >= 0
    s, hit = call_scores[keep], outcome[keep]
    if n_targets == 0:
        return float("nan")
    order = np.argsort(-s, kind="stable")
    hit = hit[order]
    precision = np.cumsum(hit) / np.arange(1, len(hit) + 1)
    return float((precision * hit).sum() / n_targets)


@dataclass
class ReadCalls:
    """Every peak of a read over a set of windows: its score, outcome, window and the distance that
    each window's anchor is from its nearest call above each threshold (computed on demand)."""

    scores: np.ndarray  # (P,) peak scores
    outcome: np.ndarray  # (P,) 1 hit / 0 false / -1 ignored (every peak a call)
    n_targets: int
    background: bool  # all windows without targets: false calls only


def collect(reads: Sequence[np.ndarray], windows: Sequence[Target], offset: int, radius: int = NMS_RADIUS,
            tol: int = TOL) -> tuple[list[tuple[np.ndarray, np.ndarray]], ReadCalls]:
    """Peaks of every window's read, moved back by ``offset``, labelled against its targets: (per window
    (call indices, call scores), all calls pooled)."""
    per_window, scores, outcomes, n = [], [], [], 0
    for s, t in zip(reads, windows, strict=True):
        idx, val = peaks(s, radius)
        idx = idx - offset
        per_window.append((idx, val))
        out, _ = match(idx, t, tol)
        scores.append(val)
        outcomes.append(out)
        n += len(t.targets)
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))
    return per_window, ReadCalls(cat(scores, np.float64), cat(outcomes, np.int64), n, n == 0)


def best_threshold(calls: ReadCalls) -> float:
    """The call threshold with the highest F1 (hits against targets) on ``calls``: one of the peak scores
    (the highest on ties of F1, i.e. the fewest calls)."""
    keep = calls.outcome >= 0
    s, hit = calls.scores[keep], calls.outcome[keep]
    if not len(s) or calls.n_targets == 0:
        raise PosencError("no validation call or target: the call threshold is undefined")
    order = np.argsort(-s, kind="stable")
    s, hit = s[order], hit[order]
    tp = np.cumsum(hit)
    f1 = 2 * tp / (np.arange(1, len(s) + 1) + calls.n_targets)
    last_of_tie = np.r_[s[1:] != s[:-1], True]  # a threshold takes every call of its score
    f1 = np.where(last_of_tie, f1, -1.0)
    return float(s[int(np.argmax(f1))])


def hit_share(per_window: Sequence[tuple[np.ndarray, np.ndarray]], windows: Sequence[Target],
              threshold: float, tol: int) -> float:
    """Share of the windows' anchors with a call (peak score >= ``threshold``) within ``tol`` bases."""
    found = [bool(len(idx) and (np.abs(idx[val >= threshold] - t.anchor) <= tol).any())
             for (idx, val), t in zip(per_window, windows, strict=True) if t.anchor >= 0]
    return float(np.mean(found)) if found else float("nan")


def false_per_kb(per_window: Sequence[tuple[np.ndarray, np.ndarray]], reads: Sequence[np.ndarray],
                 threshold: float) -> float:
    """Calls at or above ``threshold`` per 1,000 scored (non-NaN) bases of background windows."""
    bases = sum(int((~np.isnan(np.asarray(r, dtype=np.float64))).sum()) for r in reads)
    calls = sum(int((val >= threshold).sum()) for _, val in per_window)
    return 1000.0 * calls / bases if bases else float("nan")
