"""Splits (by region / by record, with a gap), window boundaries, mostly-N skipping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.dna.fasta import N_CODE, Genome, read_fasta
from datamodules.dna.splits import split_records, split_regions
from datamodules.dna.windows import RandomWindows, TiledWindows
from posenc import PosencError
from tests.helpers import random_bases, write_fasta


def toy_genome(lengths: list[int]) -> Genome:
    from datamodules.dna.fasta import EncodeReport

    lengths_arr = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths_arr)
    codes = np.zeros(int(ends[-1]), dtype=np.uint8)
    return Genome([f"r{i}" for i in range(len(lengths))], codes, ends - lengths_arr, ends, EncodeReport())


def covered(regions: list[tuple[int, int]]) -> set[int]:
    return {i for a, b in regions for i in range(a, b)}


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 400), min_size=1, max_size=4),
       train=st.floats(0.0, 1.0), val_share=st.floats(0.0, 1.0), gap=st.integers(0, 30))
def test_region_splits_are_disjoint_within_records_and_keep_the_gap(lengths, train, val_share, gap):
    val = (1.0 - train) * val_share
    g = toy_genome(lengths)
    parts = split_regions(g, (train, val, 1.0 - train - val), gap)
    sets = {k: covered(v) for k, v in parts.items()}
    assert not (sets["train"] & sets["val"] or sets["train"] & sets["test"] or sets["val"] & sets["test"])
    bounds = list(zip(g.starts.tolist(), g.ends.tolist(), strict=True))
    for regions in parts.values():
        for a, b in regions:  # no region crosses a record
            assert any(s <= a < b <= e for s, e in bounds)
    for (s, e) in bounds:  # consecutive regions of one record are ≥ gap apart
        spans = sorted((a, b) for v in parts.values() for a, b in v if s <= a < e)
        assert all(a2 - b1 >= gap for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))
    if gap == 0:  # without a gap, the splits cover every base
        assert len(sets["train"] | sets["val"] | sets["test"]) == sum(lengths)


def test_region_split_order_and_sizes():
    parts = split_regions(toy_genome([1000]), (0.8, 0.1, 0.1), gap=10)
    assert parts == {"train": [(0, 795)], "val": [(805, 895)], "test": [(905, 1000)]}


def test_record_split_assigns_whole_records():
    g = toy_genome([100, 200, 300, 400, 500])
    parts = split_records(g, (0.6, 0.2, 0.2))
    assert parts == {"train": [(0, 100), (100, 300), (300, 600)], "val": [(600, 1000)],
                     "test": [(1000, 1500)]}
    explicit = split_records(g, records={"train": ["r4", "r0"], "val": ["r1"], "test": ["r3"]})
    assert explicit["train"] == [(1000, 1500), (0, 100)] and explicit["test"] == [(600, 1000)]
    with pytest.raises(PosencError, match=r"'r1'.*more than one split"):
        split_records(g, records={"train": ["r1"], "val": ["r1"], "test": ["r2"]})
    with pytest.raises(PosencError, match="no record 'chrZ'"):
        split_records(g, records={"train": ["chrZ"], "val": ["r1"], "test": ["r2"]})
    with pytest.raises(PosencError, match="leaves no record for test"):
        split_records(toy_genome([100, 200]), (0.5, 0.5, 0.0))


def test_random_windows_never_straddle_a_region():
    regions = [(0, 50), (60, 65), (100, 140)]  # the middle one is too short for a window
    ds = RandomWindows(np.zeros(200, dtype=np.uint8), regions, length=20)
    starts = [ds.start_of(i) for i in range(len(ds))]
    assert len(ds) == 31 + 21 and len(set(starts)) == len(starts)
    assert all(any(a <= s and s + 20 <= b for a, b in regions) for s in starts)
    assert {s for s in starts if s < 60} == set(range(31))
    assert {s for s in starts if s >= 100} == set(range(100, 121))
    with pytest.raises(PosencError, match="no region is long enough for windows of 60 bases"):
        RandomWindows(np.zeros(200, dtype=np.uint8), regions, length=60)


def test_windows_of_a_two_record_genome_stay_in_their_record(tmp_path):
    g = read_fasta(write_fasta(tmp_path / "g.fa", {"a": random_bases(300, 1), "b": random_bases(200, 2)}))
    parts = split_regions(g, (0.8, 0.1, 0.1), gap=4)
    ds = RandomWindows(g.codes, parts["train"], length=32)
    for i in range(len(ds)):
        s = ds.start_of(i)
        rec = int(np.searchsorted(g.ends, s, side="right"))
        assert g.starts[rec] <= s and s + 32 <= g.ends[rec]
        assert ds[i].shape == (32,)


def test_mostly_n_windows_are_skipped():
    codes = np.zeros(400, dtype=np.uint8)
    codes[100:300] = N_CODE
    ds = RandomWindows(codes, [(0, 400)], length=50, max_n_fraction=0.5)
    for i in range(len(ds)):
        w = ds[i].numpy()
        assert (w == N_CODE).mean() <= 0.5
    tiled = TiledWindows(codes, [(0, 400)], length=50, stride=50, max_n_fraction=0.5)
    assert tiled.starts.tolist() == [0, 50, 300, 350]
    assert TiledWindows(codes, [(0, 400)], length=50, stride=50).starts.tolist() == list(range(0, 400, 50))
    with pytest.raises(PosencError, match="mostly N"):
        TiledWindows(np.full(100, N_CODE, np.uint8), [(0, 100)], 50, 50, max_n_fraction=0.5)


@pytest.mark.parametrize("extra", [0, 1])  # 1: LM windows carry one extra target base
def test_tiled_windows_cover_the_same_bases_at_every_length(extra):
    regions = [(0, 300), (400, 1000), (1100, 1200)]  # the first is not a multiple of the longest
    seen = []
    for length in (32, 64, 128, 256):
        ds = TiledWindows(np.zeros(1200, np.uint8), regions, length + extra, length, max_tokens=512 + extra,
                          align=256)
        bases = [set(range(int(s), int(s) + length)) for s in ds.starts]  # scored positions
        assert all(any(a <= s and s + length + extra <= b for a, b in regions) for s in ds.starts)
        assert sum(len(b) for b in bases) == 512  # no overlap, the whole budget
        seen.append(set().union(*bases))
    assert all(s == seen[0] for s in seen)
    # 3 block slots of 256 (at 0, 400, 656); the 2 kept are spread over them, not the first two
    assert seen[0] == set(range(0, 256)) | set(range(656, 912))
