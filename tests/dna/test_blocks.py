"""Bootstrap blocks of the evaluated span: every length gives the same block to the same bases, blocks
are runs of consecutive slots, and ``block_codes`` holds exactly the bases the windows' targets cover."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules import DNADataModule, MaskedDNADataModule
from datamodules.dna.fasta import N_CODE
from datamodules.dna.windows import MAX_BLOCKS, TiledWindows, slot_blocks
from tests.helpers import flat_dm, write_fasta

LENGTHS = [16, 32, 64]


@pytest.fixture(scope="module")
def dm(tmp_path_factory):
    """100 slots of 64 bases kept out of the 125 of a 8000-base test region: some kept slots touch
    (merged spans hold several), and 100 > MAX_BLOCKS slots are grouped into 64 blocks."""
    fasta = write_fasta(tmp_path_factory.mktemp("blocks") / "g.fa", n=80_000)
    return flat_dm(DNADataModule, fasta=str(fasta), seq_len=16, batch_size=4, eval_lengths=LENGTHS,
                   eval_tokens=6400, cache_dir=None)


def target_blocks(ds: TiledWindows, n: int) -> dict[int, int]:
    """Genome offset of every target base a window scores (s + 1 … s + n) → its window's block."""
    return {int(s) + j: int(b) for s, b in zip(ds.starts, ds.window_blocks, strict=True)
            for j in range(1, n + 1)}


@pytest.mark.parametrize("split", ["test", "val"])
def test_every_length_gives_the_same_block_to_the_same_bases(dm, split):
    found = [target_blocks(dm.eval_dataloader(split, n).dataset, n) for n in LENGTHS]
    assert all(f == found[0] for f in found[1:])
    bases = sorted(found[0])
    blocks = [found[0][b] for b in bases]
    assert len(bases) == 6400 and sorted(set(blocks)) == list(range(MAX_BLOCKS))
    assert blocks == sorted(blocks)  # a block is a run of consecutive slots in genome order
    assert len(dm.region_spans(split, dm.eval_span)) < 100  # touching slots were merged: blocks ≠ spans
    # block_codes: per block, exactly the bases its windows' targets cover, in order
    codes = np.asarray(dm.genome.codes)
    for k, segments in enumerate(dm.block_codes(split)):
        mine = [b for b in bases if found[0][b] == k]
        assert np.array_equal(np.concatenate(segments), codes[mine])


def test_the_test_loaders_number_the_blocks_like_the_sweeps_val_loaders(dm):
    for n, loader in zip(LENGTHS, dm.test_dataloader(), strict=True):
        assert target_blocks(loader.dataset, n) == target_blocks(dm.eval_dataloader("test", n).dataset, n)


def test_slots_are_grouped_into_at_most_max_blocks_runs_of_near_equal_size():
    assert slot_blocks(5).tolist() == [0, 1, 2, 3, 4]  # fewer slots than blocks: one each
    sizes = np.bincount(slot_blocks(100, 64))
    assert len(sizes) == 64 and set(sizes.tolist()) == {1, 2} and sizes.sum() == 100
    assert np.bincount(slot_blocks(2048)).tolist() == [32] * 64  # 2048 slots of 512 → 64 of 16 kb
    assert slot_blocks(0).size == 0


def test_windows_left_out_as_mostly_n_keep_the_blocks_of_the_others():
    codes = np.zeros(1200, np.uint8)
    codes[100:180] = N_CODE  # the second window of the first slot is mostly N
    regions = [(600, 1200), (0, 500)]  # regions not in genome order: blocks follow the regions' order
    ds = TiledWindows(codes, regions, length=101, stride=100, align=200, max_n_fraction=0.5, max_blocks=3)
    # slots in region order: 600, 800 (1000 has no tail base: 1000 + 200 + 1 > 1200), 0, 200 → blocks
    # 0, 0, 1, 2; the window at 100 is left out and its slot's other window keeps block 1
    assert ds.starts.tolist() == [600, 700, 800, 900, 0, 200, 300]
    assert ds.window_blocks.tolist() == [0, 0, 0, 0, 1, 2, 2]


def test_masked_lm_blocks_start_at_the_first_base_of_a_window(tmp_path):
    fasta = write_fasta(tmp_path / "g.fa", n=20_000)
    mlm = flat_dm(MaskedDNADataModule, fasta=str(fasta), seq_len=16, batch_size=4, eval_lengths=[16, 32],
                  eval_tokens=512, cache_dir=None)
    ds = mlm.eval_dataloader("test", 16).dataset  # no extra target token: every base is a token
    codes = np.asarray(mlm.genome.codes)
    for k, segments in enumerate(mlm.block_codes("test")):
        starts = ds.starts[ds.window_blocks == k]
        assert np.array_equal(np.concatenate(segments), np.concatenate([codes[s : s + 16] for s in starts]))
