"""Find short records (promoter windows) in a genome by their sequence, on both strands (Lightning-free).

A promoter set gives each record as a fixed window around its transcription start (E. coli σ70: 81 nt,
TSS at index 60); its header coordinates may refer to another assembly of the species (RegulonDB's
MG1655 against the shipped W3110), so a record is placed by where its bases occur, never by that number.

Search: each record and its reverse complement are looked up exactly in every genome record (circular
chromosomes are read across their origin). A record found nowhere exactly is looked up again allowing up
to ``max_mismatches`` substitutions: it is cut into ``max_mismatches + 1`` disjoint seeds, one of which
must then occur exactly (pigeonhole), and every seed hit is checked base by base. A record found at more
than one place (a repeat) is ambiguous: it is reported, never placed. Indels are not searched for: such a
record is reported as not found.

Coordinates are 0-based on the genome's forward strand. A site on the ``-`` strand reads the reverse
complement of ``genome[start:start + length]``, so its TSS (index ``tss_index`` of the record) sits at
``start + length - 1 - tss_index``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from datamodules.dna.fasta import Genome
from datamodules.dna.tokenize import reverse_complement
from posenc import PosencError


@dataclass(frozen=True)
class Site:
    """One record placed in the genome.

    Attributes:
        name: the record's id.
        contig: index of the genome record (chromosome) it lies on.
        start: 0-based forward-strand coordinate of the record's window (``start .. start + length``;
            past the contig's end on a circular contig it wraps to its start).
        length: the record's length in bases.
        strand: ``+1`` or ``-1``.
        tss: 0-based forward-strand coordinate of the record's TSS (its index ``tss_index``).
        mismatches: substitutions between the record and the genome there (0: exact).
    """

    name: str
    contig: int
    start: int
    length: int
    strand: int
    tss: int
    mismatches: int


@dataclass
class Located:
    """The result of :func:`locate_records`: the placed sites and what happened to the rest."""

    sites: list[Site] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)  # found at more than one place
    missing: list[str] = field(default_factory=list)  # found nowhere within max_mismatches

    def summary(self) -> dict[str, int]:
        """Counts: placed (exact / with substitutions, per strand), ambiguous, not found."""
        exact = sum(s.mismatches == 0 for s in self.sites)
        plus = sum(s.strand > 0 for s in self.sites)
        return {"records": len(self.sites) + len(self.ambiguous) + len(self.missing),
                "placed": len(self.sites), "exact": exact, "substitutions": len(self.sites) - exact,
                "plus": plus, "minus": len(self.sites) - plus,
                "ambiguous": len(self.ambiguous), "not_found": len(self.missing)}

    def describe(self) -> str:
        """One line of :meth:`summary` for a log or a report."""
        s = self.summary()
        return (f"{s['placed']} of {s['records']} records placed ({s['exact']} exact, {s['substitutions']} "
                f"with substitutions; {s['plus']} on +, {s['minus']} on -), {s['ambiguous']} at more than "
                f"one place (left out), {s['not_found']} not found (left out)")


class GenomeIndex:
    """Every ``KEY``-base word of the genome's contigs, sorted, for exact lookup; each contig is extended
    past its end by ``overhang`` bases of its start (a circular chromosome read across its origin).

    A word is its bases read as a base-4 number (A0 C1 G2 T3; a word holding an N is left out), so one
    ``np.searchsorted`` finds every place a word occurs.
    """

    KEY = 16  # bases per word: 4^16 words, so a random word occurs about once in 4 Gb

    def __init__(self, genome: Genome, overhang: int, circular: bool = True) -> None:
        self.lengths = genome.lengths.astype(np.int64).tolist()
        self.texts: list[np.ndarray] = []
        words, where = [], []
        for c, (a, b) in enumerate(zip(genome.starts.tolist(), genome.ends.tolist(), strict=True)):
            codes = np.asarray(genome.codes[a:b], dtype=np.uint8)
            tail = codes[: min(overhang, len(codes))] if circular else codes[:0]
            text = np.concatenate([codes, tail])
            self.texts.append(text)
            w, ok = _words(text[: len(codes) + max(0, min(len(tail), self.KEY - 1))], self.KEY)  # (n,)
            words.append(w[ok])
            where.append(np.stack([np.full(ok.sum(), c), np.flatnonzero(ok)], 1))  # (n, 2)
        words_all = np.concatenate(words) if words else np.zeros(0, np.int64)
        order = np.argsort(words_all, kind="stable")
        self.words = words_all[order]  # (W,) sorted
        self.where = np.concatenate(where)[order] if where else np.zeros((0, 2), np.int64)  # (W, 2)

    def find_all(self, needle: np.ndarray) -> list[tuple[int, int]]:
        """Every ``(contig, start)`` where ``needle`` (codes, at least ``KEY`` long) occurs exactly."""
        key, ok = _words(needle[: self.KEY], self.KEY)
        if not ok[0]:
            return []
        lo, hi = np.searchsorted(self.words, key[0], "left"), np.searchsorted(self.words, key[0], "right")
        out = []
        for c, s in self.where[lo:hi].tolist():
            fits = s + len(needle) <= len(self.texts[c])
            if fits and np.array_equal(self.window(c, s, len(needle)), needle):
                out.append((c, s))
        return out

    def window(self, contig: int, start: int, length: int) -> np.ndarray:
        """The codes of ``contig[start : start + length]`` (within the overhang)."""
        return self.texts[contig][start : start + length]


def _words(codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The base-4 value (n - k + 1,) of every k-base word of ``codes`` and whether it holds only ACGT."""
    if len(codes) < k:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    win = np.lib.stride_tricks.sliding_window_view(codes, k)  # (n - k + 1, k)
    vals = np.zeros(len(win), np.int64)
    for j in range(k):  # column by column: no (n, k) int64 copy
        vals = vals * 4 + np.minimum(win[:, j], 3)
    return vals, (win < 4).all(1)


def locate_records(genome: Genome, records: list[tuple[str, np.ndarray]], tss_index: int,
                   max_mismatches: int = 3, circular: bool = True) -> Located:
    """Place every record (``(id, base codes)``) in ``genome`` by sequence, on both strands.

    Args:
        genome: the encoded genome (:func:`datamodules.dna.genome_cache.load_genome`).
        records: the records to place (e.g. the promoter FASTA's, read by
            :func:`datamodules.dna.fasta.iter_records`).
        tss_index: 0-based index of the TSS in a record (60 for the 81-nt bacterial sets).
        max_mismatches: substitutions allowed where no exact copy exists (0: exact only).
        circular: read each contig across its origin (bacterial chromosomes, plasmids).

    Returns:
        The sites placed, in the order of ``records``, and the ids left out (ambiguous, not found).
    """
    if max_mismatches < 0:
        raise PosencError(f"max_mismatches must be >= 0, got {max_mismatches}")
    least = (max_mismatches + 1) * GenomeIndex.KEY
    short = [rid for rid, c in records if len(c) < least]
    if short:
        raise PosencError(f"record {short[0]!r}: shorter than {least} bases, too short to place with "
                          f"{max_mismatches} substitutions by {GenomeIndex.KEY}-base seeds")
    longest = max((len(c) for _, c in records), default=0)
    index = GenomeIndex(genome, max(longest - 1, 0), circular)
    out = Located()
    for rid, codes in records:
        codes = np.asarray(codes, dtype=np.uint8)
        if not 0 <= tss_index < len(codes):
            raise PosencError(f"record {rid!r}: {len(codes)} bases, no TSS index {tss_index}")
        hits = _hits(index, codes, max_mismatches)
        if len(hits) > 1:
            out.ambiguous.append(rid)
        elif not hits:
            out.missing.append(rid)
        else:
            (contig, start, strand, mism), = hits
            n, size = len(codes), index.lengths[contig]
            tss = (start + tss_index if strand > 0 else start + n - 1 - tss_index) % size
            out.sites.append(Site(rid, contig, start, n, strand, tss, mism))
    return out


def _hits(index: GenomeIndex, codes: np.ndarray, max_mismatches: int) -> list[tuple[int, int, int, int]]:
    """``(contig, start, strand, mismatches)`` of every place of ``codes``: the exact ones if any, else
    those within ``max_mismatches`` substitutions (the fewest found)."""
    strands = ((1, codes), (-1, reverse_complement(codes)))
    exact = [(c, s, strand, 0) for strand, seq in strands for c, s in index.find_all(seq)]
    if exact or max_mismatches == 0 or (codes > 3).sum() > max_mismatches:
        return exact
    near: set[tuple[int, int, int, int]] = set()
    for strand, seq in strands:
        for lo, hi in _seeds(len(seq), max_mismatches + 1):
            for c, s in index.find_all(seq[lo:hi]):
                start = s - lo
                if 0 <= start < index.lengths[c]:
                    diff = int((index.window(c, start, len(seq)) != seq).sum())
                    if diff <= max_mismatches:
                        near.add((c, start, strand, diff))
    if not near:
        return []
    fewest = min(h[3] for h in near)
    return sorted(h for h in near if h[3] == fewest)


def _seeds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` disjoint ``[lo, hi)`` pieces covering ``0 .. n``."""
    edges = np.linspace(0, n, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]

