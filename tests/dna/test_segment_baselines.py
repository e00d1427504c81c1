"""Segmentation references logged beside every run: the majority class and pyrodigal's own calls."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.tasks.dna.segment import SegmentBaselines, label_scores
from tests.helpers import flat_dm, random_bases, write_fasta, write_gff


def test_label_scores_match_sklearn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    target, pred = rng.integers(0, 7, 500), rng.integers(0, 7, 500)
    pred[:3] = 6
    scores = label_scores(pred, target, 7)
    assert scores["acc"] == pytest.approx(float((pred == target).mean()))
    assert scores["f1_macro"] == pytest.approx(f1_score(target, pred, average="macro"))
    assert scores["coding_acc"] == pytest.approx(float(((pred > 0) == (target > 0)).mean()))


def test_majority_and_pyrodigal_on_an_annotated_genome(tmp_path):
    from datamodules import SegmentationDataModule

    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(30_000, 3)})
    gff = write_gff(tmp_path / "a.gff", [("chr1", 101, 20_000, "+", 0), ("chr1", 24_001, 29_700, "-", 0)])
    dm = flat_dm(SegmentationDataModule, fasta=str(fasta), annotation=str(gff), seq_len=64, eval_tokens=1024,
                                cache_dir=None)
    out = SegmentBaselines().compute(dm)
    labels = np.asarray(dm.labels)
    test = np.concatenate([labels[a:b] for a, b in dm.region_spans("test", dm.eval_span)])
    train = np.concatenate([labels[a:b] for a, b in dm.region_spans("train")])
    majority = np.bincount(train).argmax()
    assert out["baseline/majority_acc"] == pytest.approx(float((test == majority).mean()))
    assert {f"baseline/pyrodigal_{k}" for k in ("acc", "f1_macro", "coding_acc")} <= set(out)
    assert 0.0 <= out["baseline/pyrodigal_acc"] <= 1.0
