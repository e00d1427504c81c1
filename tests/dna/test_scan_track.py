"""The genome scan that ``make predict`` writes for a promoter classifier (pipelines.tasks.dna.scan_track):
bedGraph and BED formats (0-based half-open, both strands), read in chunks exactly as in one piece."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from datamodules.dna.tokenize import reverse_complement
from pipelines.tasks.dna.scan_reads import peaks, whole_read
from pipelines.tasks.dna.scan_track import ScanSettings, receptive_flank, scan_records
from posenc import PosencError
from tests.helpers import token_classifier

WIDTH, TSS = 16, 11


@pytest.fixture(scope="module")
def model():
    prior = torch.softmax(torch.randn(WIDTH, generator=torch.Generator().manual_seed(0)), 0)
    return token_classifier(prior, layers=0)


def records():
    rng = np.random.default_rng(4)
    sizes = {"chrA": 300, "chrB": 70, "tiny": 9}  # tiny: shorter than a crop, never scored
    return [(name, rng.integers(0, 4, n).astype(np.uint8)) for name, n in sizes.items()]


def scan(model, chunk: int, threshold: float = -1e9, digits: int = 6) -> tuple[str, str, object]:
    track, calls = io.StringIO(), io.StringIO()
    cfg = ScanSettings(WIDTH, TSS, chunk=chunk, threshold=threshold, radius=3, digits=digits)
    done = scan_records(model, records, cfg, track, calls)
    return track.getvalue(), calls.getvalue(), done


def parse_track(text: str) -> dict[str, dict[tuple[str, int], float]]:
    """{strand: {(chrom, base): value}} from a two-track bedGraph."""
    out, strand = {}, None
    for line in text.splitlines():
        if line.startswith("track"):
            strand = line.split('name="promoter ')[1][0]
            out[strand] = {}
            continue
        chrom, start, end, value = line.split("\t")
        assert int(start) < int(end)  # 0-based half-open, never empty
        for b in range(int(start), int(end)):
            out[strand][chrom, b] = float(value)
    return out


def test_track_and_calls_match_the_one_pass_read_on_both_strands(model):
    track, calls, done = scan(model, chunk=64)
    got = parse_track(track)
    assert list(got) == ["+", "-"]
    lines = calls.splitlines()
    for chrom, codes in records():
        n = len(codes)
        plus = whole_read(model, codes, WIDTH, TSS)  # read on the + strand, index = forward coordinate
        minus = whole_read(model, reverse_complement(codes), WIDTH, TSS)[::-1]  # RC index i: base n - 1 - i
        for strand, want in (("+", plus), ("-", minus)):
            have = np.array([got[strand].get((chrom, b), np.nan) for b in range(n)])
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5, equal_nan=True)
            read = want if strand == "+" else want[::-1]  # peaks on the strand's own reading direction
            pos = sorted(b if strand == "+" else n - 1 - b for b in peaks(read, 3)[0].tolist())
            bed = [ln.split("\t") for ln in lines if ln.split("\t")[0] == chrom and ln[-1] == strand]
            assert [int(f[1]) for f in bed] == pos and all(int(f[2]) == int(f[1]) + 1 for f in bed)
            for f in bed:
                assert int(f[4]) == round(1000 / (1 + np.exp(-want[int(f[1])])))
    assert done.bases == 2 * ((300 - WIDTH + 1) + (70 - WIDTH + 1)) and done.calls == len(lines)
    names = [ln.split("\t")[3] for ln in lines]
    assert len(set(names)) == len(names)


def test_chunks_of_any_size_write_the_same_files(model):
    one = scan(model, chunk=4096)
    for chunk in (16, 17, 50):
        assert scan(model, chunk=chunk)[:2] == one[:2]
    p = np.median([int(ln.split("\t")[4]) for ln in one[1].splitlines()]) / 1000
    threshold = float(np.log(p / (1 - p)))  # half the calls
    _, calls, done = scan(model, chunk=50, threshold=threshold)
    assert all(int(ln.split("\t")[4]) >= round(1000 * p) for ln in calls.splitlines())
    assert done.calls == len(calls.splitlines()) < len(one[1].splitlines())


def test_equal_neighbours_are_merged_and_settings_checked(model):
    track = scan(model, chunk=64, digits=0)[0]
    rows = [ln.split("\t") for ln in track.splitlines() if not ln.startswith("track")]
    assert any(int(r[2]) - int(r[1]) > 1 for r in rows)  # rounded to whole logits: runs merge
    with pytest.raises(PosencError, match="tss_index"):
        scan_records(model, records, ScanSettings(WIDTH, WIDTH, chunk=64), None, io.StringIO())
    assert receptive_flank(token_classifier(layers=2, window=5), WIDTH) == 8
    assert receptive_flank(model, WIDTH) == WIDTH


def test_memory_stays_flat_in_the_record_length(model, tmp_path):
    """Peak traced memory of a scan (numpy arrays, strings) beyond the record's own codes: the same for
    a record 4x as long (the track and calls go to files as each chunk is scored)."""
    import tracemalloc

    def peak(n: int) -> int:
        codes = np.random.default_rng(n).integers(0, 4, n).astype(np.uint8)
        with open(tmp_path / "t.bedgraph", "w") as track, open(tmp_path / "c.bed", "w") as calls:
            tracemalloc.start()
            scan_records(model, lambda: [("chr", codes)], ScanSettings(WIDTH, TSS, chunk=1024), track, calls)
            size = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        return size

    small, large = peak(20_000), peak(80_000)
    assert large < small + 80_000 + 20_000  # at most the longer reverse complement (1 byte a base) more
