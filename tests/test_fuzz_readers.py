"""Property-based fuzzing of the FASTA and CSV readers: whatever the bytes, the reader either
succeeds or raises the project's own one-line :class:`posenc.PosencError` — never anything else."""

from __future__ import annotations

import gzip
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc import PosencError

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text near the formats, so the fuzzer reaches past the first line: FASTA/FASTQ/GenBank markers,
# bases, IUPAC codes, junk letters, digits, whitespace.
FASTA_ALPHABET = st.sampled_from([">", "@", "+", ";", "\n", "\r\n", " ", "\t", "A", "C", "G", "T", "N", "a",
                                  "u", "R", "-", ".", "*", "E", "1", "LOCUS", "ORIGIN", "//", "\x00", "é"])
CSV_ALPHABET = st.sampled_from(["t", "y", "x", ",", "\n", "\r\n", '"', " ", "0", "1", "9", ".", "-", ":", "e",
                                "nan", "NA", "inf", "2024-01-0", "T", "Z", "+01:00", "abc", ";", "\x00", "é"])


def fasta_outcome(data: bytes, name: str = "f.fa"):
    """The genome read from ``data``, or the one-line :class:`PosencError` that rejected it."""
    from datamodules.dna.fasta import read_fasta

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            genome = read_fasta(path)
        except PosencError as exc:
            assert str(exc).strip() and "\n" not in str(exc).strip(), repr(str(exc))
            return exc
        assert len(genome.ids) == len(set(genome.ids)) >= 1
        assert int(genome.lengths.min()) >= 1 and int(genome.codes.max()) <= 4
        return genome


def csv_outcome(data: bytes):
    """The series parsed from ``data``, or the one-line :class:`PosencError` that rejected it."""
    from datamodules.timeseries.parse import parse_series, read_table

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas may warn about inferred date formats
        path = Path(tmp) / "s.csv"
        path.write_bytes(data)
        try:
            series = parse_series(read_table(path), "t", ["y"], source=str(path))
        except PosencError as exc:
            assert str(exc).strip() and "\n" not in str(exc).strip(), repr(str(exc))
            return exc
        assert len(series) >= 2 and series.targets.shape == (len(series), 1)
        return series


@FUZZ
@given(st.binary(max_size=400))
def test_fasta_reader_on_arbitrary_bytes(data):
    fasta_outcome(data)


@FUZZ
@given(st.lists(FASTA_ALPHABET, max_size=80).map("".join))
def test_fasta_reader_on_fasta_like_text(text):
    fasta_outcome(text.encode("utf-8"))


@FUZZ
@given(st.lists(FASTA_ALPHABET, max_size=60).map("".join), st.integers(0, 200))
def test_fasta_reader_on_gzip_possibly_cut(text, cut):
    data = gzip.compress((">r1\n" + text).encode("utf-8"))
    fasta_outcome(data[: max(2, len(data) - cut)], "f.fa.gz")


@FUZZ
@given(st.binary(max_size=400))
def test_csv_reader_on_arbitrary_bytes(data):
    csv_outcome(data)


@FUZZ
@given(st.lists(CSV_ALPHABET, max_size=80).map("".join))
def test_csv_reader_on_csv_like_text(text):
    csv_outcome(("t,y\n" + text).encode("utf-8"))


@pytest.mark.parametrize(("text", "targets"), [
    ("t,y\n2024-01-01,1\n2024-01-02,2\n", [1, 2]),
    ("t,y\n0,1\n1,2\n2,3\n", [1, 2, 3]),
])
def test_csv_fuzz_harness_accepts_good_input(text, targets):
    """The harness lets good input through, parsed right: a reader that rejected it (a PosencError the
    fuzz tests would count as a clean refusal) fails here, so the fuzz tests are not vacuous."""
    series = csv_outcome(text.encode())
    assert not isinstance(series, PosencError), f"good input rejected: {series}"
    assert series.targets[:, 0].tolist() == targets


@pytest.mark.parametrize("compress", [None, "gzip"])
def test_fasta_fuzz_harness_accepts_good_input(compress):
    """The same for the FASTA harness, plain and gzipped."""
    text = b">r1 first\nACGTN\nac\n>r2\nGGG\n"
    genome = fasta_outcome(gzip.compress(text) if compress else text, "f.fa.gz" if compress else "f.fa")
    assert not isinstance(genome, PosencError), f"good input rejected: {genome}"
    assert genome.ids == ["r1", "r2"] and genome.lengths.tolist() == [7, 3]
