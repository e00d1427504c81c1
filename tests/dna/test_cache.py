"""The uint8 memmap genome cache: reuse, invalidation on edit, interrupted writes, derived caches."""

from __future__ import annotations

import json

import numpy as np
import pytest

from datamodules.dna.fasta import read_fasta
from datamodules.dna.genome_cache import cached_array, load_genome
from datamodules.paths import resolve_path
from posenc import PosencError
from tests.helpers import random_bases, write_fasta


def test_cache_is_built_once_then_reused_as_memmap(tmp_path, genome_file):
    cache = tmp_path / "cache"
    first = load_genome(genome_file, cache, progress=False)
    assert not first.cache_hit and first.cache_path.suffix == ".u8"
    assert first.cache_path.stat().st_size == 5000  # one byte per base
    second = load_genome(genome_file, cache, progress=False)
    assert second.cache_hit and isinstance(second.codes, np.memmap)
    assert second.cache_path == first.cache_path
    ref = read_fasta(genome_file)
    np.testing.assert_array_equal(second.codes, ref.codes)
    assert second.ids == ref.ids and second.starts.tolist() == ref.starts.tolist()
    with pytest.raises(ValueError):
        second.codes[0] = 1  # read-only: workers cannot corrupt the cache


def test_edited_file_is_reencoded_and_stale_entry_removed(tmp_path, genome_file):
    cache = tmp_path / "cache"
    old = load_genome(genome_file, cache, progress=False)
    write_fasta(genome_file, {"chrA": "ACGT" * 10, "chrC": random_bases(500)})
    new = load_genome(genome_file, cache, progress=False)
    assert not new.cache_hit and new.cache_path != old.cache_path
    assert new.ids == ["chrA", "chrC"] and new.lengths.tolist() == [40, 500]
    assert not old.cache_path.exists() and not old.cache_path.with_suffix(".json").exists()
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".u8"]


def test_incomplete_or_foreign_cache_entry_is_rebuilt(tmp_path, genome_file):
    cache = tmp_path / "cache"
    g = load_genome(genome_file, cache, progress=False)
    g.cache_path.with_suffix(".json").unlink()  # as if interrupted before the index was written
    assert not load_genome(genome_file, cache, progress=False).cache_hit
    index = g.cache_path.with_suffix(".json")
    meta = json.loads(index.read_text())
    index.write_text(json.dumps({**meta, "sha256": "0" * 64}))  # index of another file
    assert not load_genome(genome_file, cache, progress=False).cache_hit
    with open(g.cache_path, "ab") as fh:  # truncated/extended data file
        fh.write(b"\0")
    rebuilt = load_genome(genome_file, cache, progress=False)
    assert not rebuilt.cache_hit and rebuilt.cache_path.stat().st_size == 5000


def test_iupac_error_mode_is_not_masked_by_a_cache_built_with_n(tmp_path):
    path = tmp_path / "g.fa"
    path.write_text(">a\nACGTRACGT\n")
    assert load_genome(path, tmp_path / "c").report.to_n == 1
    with pytest.raises(PosencError, match=r"record 'a': character 'R'"):
        load_genome(path, tmp_path / "c", iupac="error")


def test_progress_bar_and_no_cache(tmp_path, genome_file, capsys):
    g = load_genome(genome_file, tmp_path / "c", progress=True)
    assert "encoding g.fa" in capsys.readouterr().err
    mem = load_genome(genome_file, None)
    assert mem.cache_path is None and not isinstance(mem.codes, np.memmap)
    np.testing.assert_array_equal(mem.codes, g.codes)


def test_cached_array_is_built_once(tmp_path):
    calls = []

    def build():
        calls.append(1)
        return np.arange(10, dtype=np.uint8)

    a = cached_array(tmp_path, "x.u8", 10, build)
    b = cached_array(tmp_path, "x.u8", 10, build)
    assert len(calls) == 1 and b.tolist() == list(range(10)) and a.tolist() == b.tolist()


def test_package_paths_resolve_to_the_shipped_genomes():
    yeast = resolve_path("package:bio_test_artifacts/prebuilt/artifacts/yeast_chr01.fasta")
    assert yeast.is_file()
    with pytest.raises(PosencError, match="not_a_package_xyz"):
        resolve_path("package:not_a_package_xyz/a.fa")
    with pytest.raises(PosencError, match="missing from package"):
        resolve_path("package:bio_test_artifacts/nope.fa")
