"""Genome windows for scanning: long stretches that hold a placed promoter at a random offset, and
stretches with no placed promoter nearby (Lightning-free).

Every window is read on one strand (``+``: the genome's bases; ``-``: their reverse complement, index 0
at the window's forward-strand end). A promoter window is read on its promoter's strand. Windows are
*nested*: for each promoter the longest window is drawn first, and each shorter one inside the next
longer, all holding the promoter's whole record; so a read that looks at short stretches only (a
classifier slid along the window) is computed once, on the longest window, and sliced for the others.

In a window, the *targets* are the TSSs (indices on the read strand) of the sites of the split being
scored (one fold's held-out promoters, or its validation promoters) whose whole record fits in the
window; *known* are the TSSs of every other placed site on that strand in the window (other folds'
promoters): a call there is neither a hit nor a false call. Background windows have no placed site on
either strand within ``margin`` bases; the genome has promoters no set names, so a false call there is
an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datamodules.dna.locate import Site
from datamodules.dna.tokenize import reverse_complement
from posenc import PosencError


@dataclass(frozen=True)
class ScanWindow:
    """A stretch ``[start, start + length)`` of contig ``contig`` read on ``strand``.

    Attributes:
        name: ``<promoter id>`` (promoter windows) or ``background<i>``.
        anchor: index of the window's own promoter TSS (``-1`` for background windows).
        targets: indices of the TSSs to find (the anchor among them).
        known: indices of other placed TSSs on this strand (ignored by the scoring).
    """

    name: str
    contig: int
    start: int
    length: int
    strand: int
    anchor: int
    targets: tuple[int, ...]
    known: tuple[int, ...]

    def index(self, pos: int) -> int:
        """The read-strand index of forward-strand coordinate ``pos``."""
        return pos - self.start if self.strand > 0 else self.start + self.length - 1 - pos

    def codes(self, contig_codes: np.ndarray) -> np.ndarray:
        """The window's bases on its strand, from its contig's codes."""
        part = np.asarray(contig_codes[self.start : self.start + self.length], dtype=np.uint8)
        return part if self.strand > 0 else reverse_complement(part)

    def inside(self, outer: ScanWindow) -> int:
        """Where this window starts in ``outer`` (read-strand index), which must hold it on its strand."""
        if outer.strand != self.strand or outer.contig != self.contig:
            raise ValueError("windows on different strands or contigs")
        return outer.index(self.start if self.strand > 0 else self.start + self.length - 1)


def _tss_in(sites: list[Site], contig: int, strand: int, lo: int, hi: int) -> list[Site]:
    return [s for s in sites if s.contig == contig and s.strand == strand and lo <= s.tss < hi]


def label_window(name: str, contig: int, start: int, length: int, strand: int, anchor: Site | None,
                 targets: list[Site], others: list[Site]) -> ScanWindow:
    """A :class:`ScanWindow` with its targets (sites of ``targets`` whose record fits in it) and known
    sites (every other site of ``targets`` or ``others`` on its strand with a TSS in it)."""
    end = start + length
    fits = [s for s in _tss_in(targets, contig, strand, start, end)
            if start <= s.start and s.start + s.length <= end]
    rest = [s for s in _tss_in(targets + others, contig, strand, start, end) if s not in fits]
    w = ScanWindow(name, contig, start, length, strand, -1, (), ())
    idx = sorted(w.index(s.tss) for s in fits)
    known = sorted({w.index(s.tss) for s in rest} - set(idx))
    return ScanWindow(name, contig, start, length, strand, w.index(anchor.tss) if anchor else -1,
                      tuple(idx), tuple(known))


def promoter_windows(targets: list[Site], others: list[Site], contig_lengths: list[int], lengths: list[int],
                     seed: int = 0, limit: int | None = None) -> dict[int, list[ScanWindow]]:
    """Nested windows ``{length: [window per promoter]}`` around every site of ``targets`` (see the
    module docstring): the promoter's record lies at a uniformly random offset in the longest window, and
    at a uniformly random offset inside the next longer window in each shorter one. A promoter whose
    contig is shorter than the longest window gets none.

    Args:
        targets: the sites to find (their windows are drawn in this order).
        others: every other placed site (known, never targets).
        contig_lengths: bases per contig (windows stay inside a contig).
        lengths: window lengths in bases, each at least a record long.
        seed: the offsets' (and the subset's) seed.
        limit: windows around this many of the targets only (a seeded random subset, in their order);
            every target is still a target wherever it lies in a window.
    """
    lengths = sorted(set(lengths), reverse=True)
    if not targets:
        raise PosencError("no promoter to place a scanning window around")
    if lengths[-1] < max(s.length for s in targets):
        raise PosencError(f"window length {lengths[-1]} is shorter than a promoter record "
                          f"({max(s.length for s in targets)} bases)")
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.permutation(len(targets))[:limit].tolist()) if limit is not None else \
        range(len(targets))
    out: dict[int, list[ScanWindow]] = {n: [] for n in lengths}
    for site in [targets[i] for i in chosen]:
        lo, hi = 0, contig_lengths[site.contig]  # the stretch the next window must stay in
        if site.start + site.length > hi or lengths[0] > hi:
            continue  # a record across a circular contig's origin, or a contig shorter than the window
        for n in lengths:
            first, last = max(lo, site.start + site.length - n), min(site.start, hi - n)
            a = int(rng.integers(first, last + 1))
            out[n].append(label_window(site.name, site.contig, a, n, site.strand, site, targets, others))
            lo, hi = a, a + n
    return out


def background_windows(sites: list[Site], contig_lengths: list[int], lengths: list[int], count: int,
                       margin: int = 1000, seed: int = 0, avoid: list[tuple[int, int, int]] = (),
                       ) -> dict[int, list[ScanWindow]]:
    """``count`` nested windows per length with no site of ``sites`` (either strand) within ``margin``
    bases, on a random strand, none overlapping another or any ``avoid`` stretch ``(contig, lo, hi)``.

    Raises:
        PosencError: when fewer than ``count`` such windows are found in 200 · count draws.
    """
    lengths = sorted(set(lengths), reverse=True)
    rng = np.random.default_rng(seed)
    weights = np.array([max(0, n - lengths[0] + 1) for n in contig_lengths], dtype=np.float64)
    if weights.sum() == 0:
        raise PosencError(f"no contig holds a background window of {lengths[0]} bases")
    by_contig = {c: np.sort([s.tss for s in sites if s.contig == c]) for c in range(len(contig_lengths))}
    taken = list(avoid)
    out: dict[int, list[ScanWindow]] = {n: [] for n in lengths}
    for _ in range(200 * count):
        if len(out[lengths[0]]) == count:
            break
        c = int(rng.choice(len(contig_lengths), p=weights / weights.sum()))
        a, strand = int(rng.integers(0, contig_lengths[c] - lengths[0] + 1)), 1 if rng.random() < 0.5 else -1
        tss = by_contig[c]
        near = np.searchsorted(tss, a - margin), np.searchsorted(tss, a + lengths[0] + margin)
        if near[1] > near[0] or any(k == c and a < hi and lo < a + lengths[0] for k, lo, hi in taken):
            continue
        taken.append((c, a, a + lengths[0]))
        lo, hi, name = a, a + lengths[0], f"background{len(out[lengths[0]])}"
        for n in lengths:
            b = int(rng.integers(lo, hi - n + 1))
            out[n].append(label_window(name, c, b, n, strand, None, [], []))
            lo, hi = b, b + n
    if len(out[lengths[0]]) < count:
        raise PosencError(f"found only {len(out[lengths[0]])} of {count} background windows of {lengths[0]} "
                          f"bases with no placed promoter within {margin} bases")
    return out
