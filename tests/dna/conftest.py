"""Tiny synthetic FASTA / GenBank / GFF writers shared by the DNA tests (files go in tmp_path)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest


def random_bases(n: int, seed: int = 0) -> str:
    return "".join(np.random.default_rng(seed).choice(list("ACGT"), size=n))


def fasta_text(records: dict[str, str], width: int = 60) -> str:
    out = []
    for rid, seq in records.items():
        out.append(f">{rid} synthetic record")
        out.extend(seq[i : i + width] for i in range(0, len(seq), width))
    return "\n".join(out) + "\n"


def write_fasta(path: Path, records: dict[str, str], compress: str | None = None) -> Path:
    """Write ``records`` as FASTA: plain, ``compress="gzip"`` or ``compress="bgzip"``."""
    text = fasta_text(records).encode()
    if compress == "gzip":
        path.write_bytes(gzip.compress(text))
    elif compress == "bgzip":
        from Bio import bgzf

        with bgzf.BgzfWriter(str(path), "wb") as fh:
            fh.write(text)
    else:
        path.write_bytes(text)
    return path


def write_genbank(path: Path, records: dict[str, str]) -> Path:
    from Bio import SeqIO
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    recs = [SeqRecord(Seq(s), id=rid, name=rid, annotations={"molecule_type": "DNA"})
            for rid, s in records.items()]
    SeqIO.write(recs, str(path), "genbank")
    return path


def write_gff(path: Path, cds: list[tuple[str, int, int, str, int | str]]) -> Path:
    """GFF3 with one gene + one CDS line per ``(record, start, end, strand, phase)`` (1-based, inclusive)."""
    lines = ["##gff-version 3"]
    for n, (rid, start, end, strand, phase) in enumerate(cds):
        lines.append(f"{rid}\ttest\tgene\t{start}\t{end}\t.\t{strand}\t.\tID=gene{n}")
        lines.append(f"{rid}\ttest\tCDS\t{start}\t{end}\t.\t{strand}\t{phase}\tID=cds{n};Parent=gene{n}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def genome_file(tmp_path: Path) -> Path:
    """Two records of random ACGT (3000 and 2000 bases)."""
    return write_fasta(tmp_path / "g.fa", {"chrA": random_bases(3000, 1), "chrB": random_bases(2000, 2)})
