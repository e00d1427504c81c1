"""FASTA/GenBank parsing and base encoding: formats, compression, IUPAC, case, empty records, errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from datamodules.dna.fasta import decode_bases, encode_bases, read_fasta
from posenc import PosencError
from tests.helpers import random_bases, write_fasta, write_genbank


@pytest.mark.parametrize("compress", [None, "gzip", "bgzip"])
def test_multi_record_fasta_plain_and_compressed(tmp_path, compress):
    recs = {"r1": random_bases(130, 1), "r2": random_bases(61, 2), "r3": random_bases(7, 3)}
    g = read_fasta(write_fasta(tmp_path / "g.fa.gz", recs, compress))
    assert g.ids == ["r1", "r2", "r3"]
    assert g.lengths.tolist() == [130, 61, 7]
    for i, seq in enumerate(recs.values()):
        assert decode_bases(g.codes[g.starts[i] : g.ends[i]]) == seq
    assert g.report.lowercase == g.report.to_n == 0


def test_bgzip_really_is_block_gzip(tmp_path):
    path = write_fasta(tmp_path / "g.fa.bgz", {"r": random_bases(200_000)}, "bgzip")
    assert path.read_bytes()[12:14] == b"BC"  # the BGZF extra subfield
    assert read_fasta(path).lengths.tolist() == [200_000]


def test_genbank_matches_fasta(tmp_path):
    recs = {"recA": random_bases(250, 4), "recB": random_bases(90, 5)}
    gb = read_fasta(write_genbank(tmp_path / "g.gb", recs))
    gz = tmp_path / "g.gb.gz"
    gz.write_bytes(gzip.compress((tmp_path / "g.gb").read_bytes()))
    np.testing.assert_array_equal(read_fasta(gz).codes, gb.codes)
    fa = read_fasta(write_fasta(tmp_path / "g.fa", recs))
    assert gb.ids == fa.ids
    np.testing.assert_array_equal(gb.codes, fa.codes)


def test_iupac_lowercase_and_u_are_reported(tmp_path):
    path = tmp_path / "g.fa"
    path.write_text(">a\nACgtRY\nnNu\n>b\nACGT-K\n")
    g = read_fasta(path)
    assert decode_bases(g.codes[g.starts[0] : g.ends[0]]) == "ACGTNNNNT"
    assert decode_bases(g.codes[g.starts[1] : g.ends[1]]) == "ACGTNN"
    r = g.report
    assert (r.lowercase, r.to_n, r.u_to_t) == (4, 4, 1)  # g t n u; R Y - K; u
    assert r.per_record == {"a": 7, "b": 2}  # changes per record: 4 lower-case + 2 to N + 1 U
    assert "4 soft-masked" in r.summary() and "4 non-ACGTN" in r.summary()


def test_iupac_error_mode_names_file_record_and_position(tmp_path):
    path = tmp_path / "g.fa"
    path.write_text(">a\nACGT\n>b\nACGTW\n")
    with pytest.raises(PosencError, match=r"g\.fa: record 'b': character 'W' at position 5 is an IUPAC"):
        read_fasta(path, iupac="error")


def test_non_ascii_header_is_fine_but_a_non_ascii_base_is_an_error(tmp_path):
    path = tmp_path / "g.fa"
    path.write_bytes(">a 5 µm sample\nACGT\n".encode())
    assert read_fasta(path).ids == ["a"]
    path.write_bytes(">a\nACGTé\n".encode())
    with pytest.raises(PosencError, match=r"record 'a': character '.' at position 5 is not a nucleotide"):
        read_fasta(path)


def test_empty_records_are_skipped_and_listed(tmp_path):
    path = tmp_path / "g.fa"
    path.write_text(">empty1\n>full\nACGT\n>empty2\n\n")
    g = read_fasta(path)
    assert g.ids == ["full"]
    assert g.report.empty == ["empty1", "empty2"]
    assert "2 empty record(s)" in g.report.summary()


def test_encode_bases_lut():
    codes = encode_bases(b"ACGTNacgtn")
    assert codes.tolist() == [0, 1, 2, 3, 4] * 2
    with pytest.raises(PosencError, match="not a nucleotide code"):
        encode_bases(b"ACE", where="x")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, r"missing\.fa: sequence file not found"),
        ("", r"bad\.fa: contains no sequences \(the file is empty\)"),
        ("hello world\nACGT\n", r"bad\.fa: not a FASTA or GenBank file"),
        ("@read1\nACGT\n+\nIIII\n", r"bad\.fa: not a FASTA .*looks like FASTQ"),
        (">a\n>b\n", r"bad\.fa: contains no sequences \(every record is empty\)"),
        (">p1\nACGTQE\n", r"bad\.fa: record 'p1': character 'Q' at position 5 is not a nucleotide code"),
        (">a\nAC\n>a\nGT\n", r"bad\.fa: duplicate record id 'a'"),
    ],
)
def test_bad_input_is_one_line_error_naming_the_file(tmp_path, content, match):
    path = tmp_path / ("missing.fa" if content is None else "bad.fa")
    if content is not None:
        path.write_text(content)
    with pytest.raises(PosencError, match=match) as info:
        read_fasta(path)
    assert "\n" not in str(info.value)


def test_binary_and_corrupt_gzip_are_clear_errors(tmp_path):
    binary = tmp_path / "x.fa"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(PosencError, match=r"x\.fa: "):
        read_fasta(binary)
    corrupt = tmp_path / "y.fa.gz"
    corrupt.write_bytes(gzip.compress(b">a\nACGT\n" * 100)[:40])
    with pytest.raises(PosencError, match=r"y\.fa\.gz: "):
        read_fasta(corrupt)
