"""Fixtures of the DNA tests (the FASTA / GenBank / GFF writers are in tests/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import random_bases, write_fasta


@pytest.fixture
def genome_file(tmp_path: Path) -> Path:
    """Two records of random ACGT (3000 and 2000 bases)."""
    return write_fasta(tmp_path / "g.fa", {"chrA": random_bases(3000, 1), "chrB": random_bases(2000, 2)})
