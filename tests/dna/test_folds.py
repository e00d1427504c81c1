"""K-fold cross-validation of labelled sequences (stratified, disjoint, seeded, validation carved from the
training folds), and a length sweep that does not test crops longer than every record."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.dna.samples import SampleSet, fold_samples
from posenc import PosencError
from tests.helpers import flat_dm, write_fasta


def labelled(n_pos: int, n_neg: int) -> SampleSet:
    n = n_pos + n_neg
    starts = np.arange(n, dtype=np.int64) * 10
    labels = np.r_[np.ones(n_pos), np.zeros(n_neg)].astype(np.int64)
    return SampleSet(np.zeros(n * 10, np.uint8), starts, starts + 10, labels, [f"s{i}" for i in range(n)])


def fold_sets(samples: SampleSet, k: int, seed: int) -> list[dict[str, set[str]]]:
    return [{name: set(s.names) for name, s in fold_samples(samples, k, i, 0.2, seed).items()}
            for i in range(k)]


def test_the_test_folds_are_disjoint_cover_every_sample_and_are_stratified():
    samples = labelled(23, 77)
    folds = fold_sets(samples, 5, seed=3)
    tests = [f["test"] for f in folds]
    assert set().union(*tests) == set(samples.names) and sum(map(len, tests)) == len(samples)
    for f in folds:
        assert not (f["train"] & f["val"] or f["train"] & f["test"] or f["val"] & f["test"])
        assert f["train"] | f["val"] | f["test"] == set(samples.names)
        positives = sum(int(name[1:]) < 23 for name in f["test"])
        assert positives in (4, 5) and len(f["test"]) - positives in (15, 16)  # 23/5 and 77/5, ± 1
        val_pos = sum(int(name[1:]) < 23 for name in f["val"])
        assert val_pos == round(0.2 * (23 - positives))  # validation stratified too


def test_the_seed_draws_the_folds_and_the_same_seed_draws_them_again():
    samples = labelled(30, 30)
    assert fold_sets(samples, 3, seed=0) == fold_sets(samples, 3, seed=0)
    assert fold_sets(samples, 3, seed=0)[0]["test"] != fold_sets(samples, 3, seed=1)[0]["test"]


def test_a_class_smaller_than_the_folds_is_one_line():
    with pytest.raises(PosencError, match="class 1 has 3 sample"):
        fold_samples(labelled(3, 40), 5, 0, 0.1, 0)


def test_the_datamodule_takes_its_folds_from_the_samples_group(tmp_path):
    from datamodules import ClassificationDataModule

    rng = np.random.default_rng(0)
    pos = write_fasta(tmp_path / "p.fa", {f"p{i}": "".join(rng.choice(list("ACGT"), 40)) for i in range(20)})
    neg = write_fasta(tmp_path / "n.fa", {f"n{i}": "".join(rng.choice(list("ACGT"), 40)) for i in range(30)})
    seen = set()
    for fold in range(5):
        dm = flat_dm(ClassificationDataModule, class_fastas={"promoter": str(pos), "non_promoter": str(neg)},
                     folds=5, fold=fold, seq_len=32, cache_dir=None, seed=7)
        assert dm.class_names == ["non_promoter", "promoter"]
        assert np.bincount(dm.sets["test"].labels).tolist() == [6, 4]
        seen |= set(dm.sets["test"].names)
    assert len(seen) == 50
    with pytest.raises(PosencError, match="samples.fold: must be below folds"):
        flat_dm(ClassificationDataModule, class_fastas={"a": str(pos), "b": str(neg)}, folds=5, fold=5)


def test_test_lengths_past_the_records_are_left_out_and_said(tmp_path, caplog):
    from datamodules import ClassificationDataModule
    from datamodules.dna.classify import testable_lengths
    from datamodules.dna.tokenize import KmerTokenizer

    one = KmerTokenizer(1)
    assert testable_lengths([128, 256, 512], one, 81) == ([128], [256, 512])  # the 81-nt records
    assert testable_lengths([64, 128, 256], one, 81) == ([64, 128], [256])  # 64 crops, 128 holds them whole
    assert testable_lengths([128, 256, 512], one, 300) == ([128, 256, 512], [])
    rng = np.random.default_rng(1)
    recs = {f"s{i}": "".join(rng.choice(list("ACGT"), 81)) for i in range(12)}
    fasta = write_fasta(tmp_path / "s.fa", recs)
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(f"s{i},{'ab'[i % 2]}\n" for i in range(12)))
    with caplog.at_level("WARNING"):
        dm = flat_dm(ClassificationDataModule, fasta=str(fasta), labels=str(tmp_path / "labels.csv"),
                     seq_len=128, split=[0.5, 0.25, 0.25], cache_dir=None)
    assert dm.eval_lengths == [128] and dm.untested_lengths == [256, 512]
    assert len(dm.test_dataloader()) == 1
    assert "test lengths [256, 512] tokens not tested" in caplog.text
