"""Decompression is bounded by the memory estimate (issue 42): a gzip bomb — one record of tens of
megabytes from a few kilobytes — is one line when it cannot fit, while a file of many small records
that fits is read; the bound is on the file's total (issue 56: tests/test_hostile_inputs.py).
``$POSENC_MEMORY_LIMIT`` caps the memory assumed available."""

from __future__ import annotations

import gzip

import pytest

from posenc import PosencError


def bomb(path, megabytes: int, records: int = 1):
    """``records`` records of ``megabytes`` MiB of ``A`` in all, gzip-compressed (~1000:1)."""
    per = (megabytes << 20) // records
    line = b"A" * 1023 + b"\n"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for r in range(records):
            fh.write(f">r{r}\n".encode())
            fh.write(line * (per // len(line)))
    return path


def test_a_gzip_bomb_is_one_line_not_an_exhausted_machine(tmp_path, monkeypatch):
    from datamodules.dna.fasta import read_fasta

    path = bomb(tmp_path / "bomb.fa.gz", 24)
    assert path.stat().st_size < 1 << 20
    monkeypatch.setenv("POSENC_MEMORY_LIMIT", "64M")  # 8 MiB of one record at 8 bytes per base
    with pytest.raises(PosencError) as err:
        read_fasta(path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: decompresses past 0.0")
    assert "decompression bomb" in line and "POSENC_MEMORY_CHECK=0" in line


def test_many_small_records_that_fit_are_read(tmp_path, monkeypatch):
    """2 bytes a base once kept, 8 while read: 22 MiB kept + 2 MiB being read ≈ 60 MiB, under 64."""
    from datamodules.dna.fasta import read_fasta

    path = bomb(tmp_path / "many.fa.gz", 24, records=12)  # 2 MiB each, 24 MiB in all
    monkeypatch.setenv("POSENC_MEMORY_LIMIT", "64M")
    genome = read_fasta(path)
    assert len(genome.ids) == 12


def test_the_check_can_be_switched_off_and_sizes_parse(monkeypatch):
    from datamodules.memory import host_available_bytes, parse_size

    assert parse_size("4G") == 4 << 30 and parse_size("512M") == 512 << 20 and parse_size("1024") == 1024
    assert parse_size("1.5GiB") == 3 << 29 and parse_size("") is None and parse_size("lots") is None
    monkeypatch.setenv("POSENC_MEMORY_LIMIT", "1M")
    assert host_available_bytes() == 1 << 20
