"""The genome locator (datamodules.dna.locate) on planted promoters, and the scanning windows built on it."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.dna.fasta import EncodeReport, Genome
from datamodules.dna.locate import Site, locate_records
from datamodules.dna.scan_windows import background_windows, label_window, promoter_windows
from datamodules.dna.tokenize import reverse_complement
from posenc import PosencError

N, TSS = 81, 60


def genome_of(*contigs: np.ndarray) -> Genome:
    lengths = np.array([len(c) for c in contigs])
    ends = np.cumsum(lengths)
    return Genome([f"chr{i}" for i in range(len(contigs))], np.concatenate(contigs), ends - lengths, ends,
                  EncodeReport())


@pytest.fixture
def planted():
    """A 20-kb random contig and a 5-kb one with records planted on both strands, one mutated at two
    bases, one repeated, one across contig 0's origin; and one record found nowhere."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, 20_000).astype(np.uint8), rng.integers(0, 4, 5_000).astype(np.uint8)
    recs = {f"p{i}": rng.integers(0, 4, N).astype(np.uint8) for i in range(7)}
    a[1000:1081] = recs["p0"]  # + strand
    a[5000:5081] = reverse_complement(recs["p1"])  # - strand
    b[300:381] = reverse_complement(recs["p2"])  # - strand, second contig
    mutated = recs["p3"].copy()
    mutated[[10, 70]] = (mutated[[10, 70]] + 1) % 4
    a[9000:9081] = mutated  # two substitutions
    a[12000:12081] = recs["p4"]
    b[4000:4081] = reverse_complement(recs["p4"])  # a repeat: ambiguous
    a[-30:], a[:51] = recs["p5"][:30], recs["p5"][30:]  # across the origin of circular contig 0
    return genome_of(a, b), recs


def test_planted_records_are_placed_on_both_strands(planted):
    genome, recs = planted
    found = locate_records(genome, list(recs.items()), TSS, max_mismatches=3)
    sites = {s.name: s for s in found.sites}
    assert sites["p0"] == Site("p0", 0, 1000, N, 1, 1000 + TSS, 0)
    assert sites["p1"] == Site("p1", 0, 5000, N, -1, 5000 + N - 1 - TSS, 0)
    assert sites["p2"] == Site("p2", 1, 300, N, -1, 300 + N - 1 - TSS, 0)
    assert (sites["p3"].start, sites["p3"].strand, sites["p3"].mismatches) == (9000, 1, 2)
    assert (sites["p5"].start, sites["p5"].tss) == (20_000 - 30, (20_000 - 30 + TSS) % 20_000)
    assert found.ambiguous == ["p4"] and found.missing == ["p6"]
    assert found.summary() == {"records": 7, "placed": 5, "exact": 4, "substitutions": 1, "plus": 3,
                               "minus": 2, "ambiguous": 1, "not_found": 1}
    for s in found.sites:  # the TSS base is the record's base at TSS, read on the site's strand
        contig = np.asarray(genome.codes[genome.starts[s.contig]:genome.ends[s.contig]])
        base = contig[s.tss] if s.strand > 0 else 3 - contig[s.tss]
        assert base == recs[s.name][TSS] or s.mismatches


def test_exact_only_and_linear_contigs(planted):
    genome, recs = planted
    found = locate_records(genome, list(recs.items()), TSS, max_mismatches=0, circular=False)
    assert {s.name for s in found.sites} == {"p0", "p1", "p2"}
    assert found.missing == ["p3", "p5", "p6"]


def test_bad_settings_are_refused(planted):
    genome, recs = planted
    with pytest.raises(PosencError, match="no TSS index 90"):
        locate_records(genome, list(recs.items()), 90)
    with pytest.raises(PosencError, match="too short"):
        locate_records(genome, [("short", recs["p0"][:40])], 20, max_mismatches=3)


def test_nested_windows_hold_their_promoter(planted):
    genome, recs = planted
    sites = locate_records(genome, list(recs.items()), TSS).sites
    targets, others = [s for s in sites if s.name in ("p0", "p1", "p2")], [s for s in sites if s.name == "p3"]
    lengths = [500, 1000, 2000]
    wins = promoter_windows(targets, others, [20_000, 5_000], lengths, seed=3)
    contigs = [np.asarray(genome.codes[a:b]) for a, b in zip(genome.starts, genome.ends, strict=True)]
    assert [len(wins[n]) for n in lengths] == [3, 3, 3]
    for j, site in enumerate(targets):
        for n in lengths:
            w = wins[n][j]
            assert w.length == n and w.strand == site.strand and w.name == site.name
            codes = w.codes(contigs[w.contig])  # read on the promoter's strand: the record at anchor − TSS
            assert np.array_equal(codes[w.anchor - TSS : w.anchor - TSS + N], recs[site.name])
            assert w.anchor in w.targets
            outer = wins[max(lengths)][j]
            o = w.inside(outer)
            assert np.array_equal(outer.codes(contigs[w.contig])[o : o + n], codes)  # nested
    offsets = [wins[2000][j].anchor for j in range(3)]
    assert len(set(offsets)) == 3  # random offsets
    two = promoter_windows(targets, others, [20_000, 5_000], lengths, seed=3, limit=2)
    assert len(two[500]) == 2 and {w.name for w in two[500]} < {s.name for s in targets}


def test_window_labels_targets_and_known():
    p0, near = Site("p0", 0, 1000, N, 1, 1000 + TSS, 0), Site("n", 0, 1200, N, 1, 1200 + TSS, 0)
    minus, edge = Site("m", 0, 1100, N, -1, 1100 + 20, 0), Site("e", 0, 1400, N, 1, 1400 + TSS, 0)
    w = label_window("p0", 0, 900, 580, 1, p0, [p0, edge], [near, minus])
    assert (w.anchor, w.targets, w.known) == (160, (160,), (360, 560))  # e: its record runs past the end
    r = label_window("m", 0, 1000, 300, -1, minus, [minus], [p0])
    assert (r.anchor, r.targets, r.known) == (1299 - 1120, (179,), ())  # p0 is on the other strand


def test_background_windows_keep_away_from_promoters(planted):
    genome, recs = planted
    sites = locate_records(genome, list(recs.items()), TSS).sites
    wins = background_windows(sites, [20_000, 5_000], [300, 600], count=4, margin=200, seed=1)
    tss = [(s.contig, s.tss) for s in sites]
    for w in wins[600]:
        assert not w.targets and not w.known and w.anchor == -1
        assert all(not (c == w.contig and w.start - 200 <= t < w.start + 600 + 200) for c, t in tss)
    spans = sorted((w.contig, w.start) for w in wins[600])  # no two overlap
    assert all(a[0] != b[0] or b[1] - a[1] >= 600 for a, b in zip(spans, spans[1:], strict=False))
    with pytest.raises(PosencError, match="found only"):
        background_windows(sites, [20_000, 5_000], [4000], count=50, margin=2000, seed=1)
