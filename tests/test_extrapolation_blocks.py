"""Per-block sums of the DNA LM's length sweep (the seed × block bootstrap's input): they add up to the
metric at every length, the trivial baseline's to its value over exactly the scored target bases, and
the claims' DNA LM scores at least 1 Mb of its test region. Tiny untrained models: no training here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from datamodules import DNADataModule, MaskedDNADataModule
from pipelines import DNALanguageModel
from pipelines.eval.extrapolation import evaluate
from pipelines.tasks.dna.markov import MarkovModel
from tests.helpers import ROOT, flat_dm, task, write_fasta

LENGTHS = [8, 16, 32]
TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2, "pe": {"class_path": "posenc.RoPE"}}


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """An untrained tiny RoPE LM and a datamodule keeping 100 of the 125 slots of 32 bases of each
    4000-base split (grouped into 64 blocks)."""
    fasta = write_fasta(tmp_path_factory.mktemp("blocks") / "g.fa", n=40_000)
    dm = flat_dm(DNADataModule, fasta=str(fasta), seq_len=8, batch_size=128, eval_lengths=LENGTHS,
                 eval_tokens=3200, cache_dir=None)
    torch.manual_seed(0)
    return task(DNALanguageModel, vocab_size=dm.vocab_size, pad_id=dm.pad_id, **TINY).eval(), dm


def target_codes(dm, split: str, n: int) -> np.ndarray:
    """The codes of every target base the windows of ``n`` tokens score (s + 1 … s + n)."""
    codes = np.asarray(dm.genome.codes)
    return np.concatenate([codes[s + 1 : s + n + 1] for s in dm.eval_dataloader(split, n).dataset.starts])


@pytest.mark.parametrize("split", ["test", "val"])
def test_blocks_add_up_to_the_metric_and_the_trivial_baseline_at_every_length(lm, split):
    model, dm = lm
    res = evaluate(model, dm, lengths=LENGTHS, variants=["pi"], split=split)
    assert {c.variant for c in res.cells} == {"trained", "pi"}  # every variant gets its blocks
    trivial = res.trivial_blocks
    assert trivial.shape == (64, 2)
    assert trivial[:, 0].sum() / trivial[:, 1].sum() == pytest.approx(res.trivial, rel=1e-12)
    for cell in res.cells:
        assert cell.blocks.shape == (64, 2)
        assert cell.blocks[:, 0].sum() / cell.blocks[:, 1].sum() == pytest.approx(cell.metric, rel=1e-12)
        assert np.array_equal(cell.blocks[:, 1], trivial[:, 1])  # the same bases, block by block
    # the trivial value is order-0 Markov over exactly the target bases (not each span's first base)
    chain = MarkovModel(0).fit(dm.region_codes("train"))
    assert res.trivial == pytest.approx(chain.bits_per_base([target_codes(dm, split, 32)]), rel=1e-12)
    assert trivial[:, 1].sum() == len(target_codes(dm, split, 8)) == 3200


def test_a_partial_sweep_has_no_blocks_but_its_metric(lm):
    model, dm = lm
    res = evaluate(model, dm, lengths=LENGTHS, variants=[], max_batches=1)  # most blocks unscored
    assert all(c.blocks is None and c.metric is not None for c in res.cells)
    assert res.trivial_blocks is not None  # the baseline needs no model


def test_masked_lm_blocks_add_up_to_its_metric(tmp_path):
    from pipelines import MaskedDNAModel

    dm = flat_dm(MaskedDNADataModule, fasta=str(write_fasta(tmp_path / "g.fa", n=20_000)), seq_len=16,
                 batch_size=4, eval_lengths=[16, 32], eval_tokens=512, cache_dir=None)
    torch.manual_seed(0)
    model = task(MaskedDNAModel, vocab_size=dm.vocab_size, pad_id=dm.pad_id, d_model=16, n_heads=2,
                 n_layers=2)
    res = evaluate(model.eval(), dm, lengths=[16, 32], variants=[])
    for cell in res.cells:
        assert cell.blocks[:, 0].sum() / cell.blocks[:, 1].sum() == pytest.approx(cell.metric, rel=1e-12)
    codes = np.concatenate([s for block in dm.block_codes("test") for s in block])
    chain = MarkovModel(0).fit(dm.region_codes("train"))
    assert res.trivial == pytest.approx(chain.bits_per_base([codes]), rel=1e-12)  # every base of the span


def test_the_claims_dna_lm_scores_at_least_a_megabase_of_its_test_region():
    """From the config and the default genome's length (E. coli K-12, counted here; no training):
    the test region the config's split gives, cut into slots of the longest length as the
    datamodule cuts it, holds at least 1,000,000 scored bases."""
    import gzip

    from datamodules.dna.fasta import EncodeReport, Genome
    from datamodules.dna.genome_cache import default_genome
    from datamodules.dna.splits import split_regions
    from datamodules.dna.windows import aligned_slots

    cfg = yaml.safe_load((ROOT / "configs/experiments/tasks/dna_lm.yaml").read_text())["data"]["init_args"]
    assert "fasta" not in cfg.get("genome", {})  # the default genome
    with gzip.open(default_genome(), "rt") as fh:
        n = sum(len(line.strip()) for line in fh if not line.startswith(">"))
    genome = Genome(["chr"], np.zeros(0, np.uint8), np.array([0]), np.array([n]), EncodeReport())
    test = split_regions(genome, tuple(cfg["regions"]["split"]))["test"]
    w = cfg["windows"]
    longest = max(w["eval_lengths"])
    budget = -(-w["eval_tokens"] // longest) * longest + 1  # bases, with the LM's extra target base
    assert len(aligned_slots(test, budget, longest, 1)) * longest >= 1_000_000


def test_smoke_cuts_the_length_sweep_of_a_task_to_two_batches():
    """``--smoke`` is a wiring check: a child of the DNA LM task must not score its whole 1 Mb."""
    from pipelines.eval.evaluate import load_config
    from pipelines.studies.claims.context import SMOKE, smoke_overlay

    config = load_config([str(ROOT / "configs/experiments/tasks/dna_lm.yaml")])
    callbacks = config["trainer"]["callbacks"]
    (configured,) = [c for c in callbacks if c["class_path"] == "pipelines.ExtrapolationEval"]
    (sweep,) = smoke_overlay(config)["trainer"]["callbacks"]
    assert sweep["class_path"] == "pipelines.ExtrapolationEval" and sweep["init_args"]["max_batches"] == 2
    assert sweep["init_args"]["factors"] == configured["init_args"]["factors"]  # the rest as configured
    assert smoke_overlay({"trainer": {"max_epochs": 3}}) == SMOKE  # no sweep: the trainer limits only
