"""The DNA datamodules on tiny files: batches, vocabulary, short records, RC augmentation with
labels, per-worker seeding, fixed MLM test masks, classification sources and their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.dna.annotation import rc_labels
from datamodules.dna.fasta import read_fasta
from datamodules.dna.samples import demo_gene_starts
from datamodules.dna.tokenize import IGNORE_INDEX, KmerTokenizer, reverse_complement
from datamodules.dna.windows import WindowItem
from posenc import PosencError
from tests.helpers import flat_dm, random_bases, write_fasta, write_gff


def lm(path, **kw):
    from datamodules import DNADataModule

    args = {"seq_len": 32, "batch_size": 4, "samples_per_epoch": 8, "eval_tokens": 256, "cache_dir": None}
    return flat_dm(DNADataModule, fasta=str(path), **{**args, **kw})


def test_lm_batches_vocab_and_eval_lengths(tmp_path):
    path = write_fasta(tmp_path / "g.fa", {"a": random_bases(8000, 1), "b": random_bases(6000, 2)})
    dm = lm(path, kmer=3, kmer_stride=3)
    assert dm.vocab_size == 67 and dm.pad_id == 65
    batch = next(iter(dm.train_dataloader()))
    assert batch.shape == (4, 33) and batch.dtype == torch.int64 and int(batch.max()) < 67
    tests = dm.test_dataloader()
    assert [next(iter(t)).shape[1] for t in tests] == [33, 65, 129, 257]  # seq_len × 1, 2, 4, 8 (+1 target)
    assert {sum(b.shape[0] * (b.shape[1] - 1) for b in t) for t in tests} == {256}  # same tokens per length


def test_record_shorter_than_a_window_is_an_error_unless_skipped(tmp_path):
    path = write_fasta(tmp_path / "g.fa", {"long": random_bases(3000), "tiny": "ACGTACGT"})
    too_long = r"g\.fa: the test split \(300 bases\) is shorter than one window of 301"
    with pytest.raises(PosencError, match=too_long):
        lm(path, eval_lengths=[32, 300], skip_short_records=True)
    short = r"g\.fa: record 'tiny' has 8 bases, shorter than one training window of 33"
    with pytest.raises(PosencError, match=short):
        lm(path)
    dm = lm(path, skip_short_records=True)
    assert dm.genome.ids == ["long"]


def test_split_by_record_keeps_records_apart(tmp_path):
    recs = {f"c{i}": random_bases(800, i) for i in range(5)}
    dm = lm(write_fasta(tmp_path / "g.fa", recs), split_by="record", split=(0.6, 0.2, 0.2), eval_tokens=64,
            eval_lengths=[32, 64])
    assert [len(v) for v in dm.regions.values()] == [3, 1, 1]
    assert dm.regions["test"] == [(3200, 4000)]


def test_rc_augmentation_transforms_tokens_and_labels_together():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, 500).astype(np.uint8)
    labels = rng.integers(0, 7, 500).astype(np.uint8)
    tok = KmerTokenizer()
    plain = WindowItem(codes, 64, tok, labels=labels, rc_prob=0.0)(100)
    flipped = WindowItem(codes, 64, tok, labels=labels, rc_prob=1.0)(100)
    np.testing.assert_array_equal(flipped["tokens"].numpy(), reverse_complement(plain["tokens"].numpy()))
    np.testing.assert_array_equal(flipped["labels"].numpy(), rc_labels(plain["labels"].numpy()))
    # a + strand frame-0 base becomes a − strand frame-0 base at the mirrored position
    j = int(np.flatnonzero(plain["labels"].numpy() == 1)[0])
    assert int(flipped["labels"][63 - j]) == 4


def test_rc_augmentation_is_seeded_and_differs_between_workers():
    codes = np.random.default_rng(0).integers(0, 4, 400).astype(np.uint8)

    class Starts(torch.utils.data.Dataset):
        def __init__(self, item):
            self.item = item

        def __len__(self):
            return 64

        def __getitem__(self, i):
            return self.item(0)  # the same window: only the RC coin differs

    def draws(num_workers, seed=0):
        torch.manual_seed(123)
        ds = Starts(WindowItem(codes, 16, KmerTokenizer(), rc_prob=0.5, seed=seed))
        dl = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=num_workers)
        return torch.cat([(b[:, 0] != int(codes[0])).long() for b in dl]).tolist()  # 1 = RC'd

    first = draws(2)
    assert first == draws(2)  # reproducible
    assert 10 < sum(first) < 54  # about half flipped
    assert first[:8] != first[8:16]  # worker 0 and worker 1 do not replay the same coins
    assert draws(0) == draws(0) and draws(0, seed=1) != draws(0)


def test_segmentation_labels_from_gff_and_errors(tmp_path):
    from datamodules import SegmentationDataModule

    fasta = write_fasta(tmp_path / "g.fa", {"r": random_bases(2000)})
    gff = write_gff(tmp_path / "a.gff", [("r", 101, 400, "+", 0), ("r", 1001, 1300, "-", 0)])
    args = {"fasta": str(fasta), "seq_len": 32, "eval_tokens": 64, "eval_lengths": [32, 64], "batch_size": 2,
            "rc_prob": 0.5, "cache_dir": str(tmp_path / "cache")}
    dm = flat_dm(SegmentationDataModule, annotation=str(gff), **args)
    assert dm.num_classes == 7 and dm.labels[100:106].tolist() == [1, 2, 3, 1, 2, 3]
    assert dm.labels[1297:1300].tolist() == [6, 5, 4] and dm.labels[1300] == 0
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == batch["labels"].shape == (2, 32)
    (tmp_path / "b.gff").write_text("r\tt\tCDS\t1900\t2100\t.\t+\t0\tID=x\n")
    past_end = r"b\.gff: line 1: CDS 1900\.\.2100 on record 'r' exceeds its length 2000"
    with pytest.raises(PosencError, match=past_end):
        flat_dm(SegmentationDataModule, annotation=str(tmp_path / "b.gff"), **args)
    with pytest.raises(PosencError, match="kmer and data.init_args.windows.kmer_stride must be 1"):
        flat_dm(SegmentationDataModule, annotation=str(gff), kmer=3, kmer_stride=3, **args)


def test_masked_lm_masks_the_same_bases_at_every_test_length(genome_file):
    from datamodules import MaskedDNADataModule

    dm = flat_dm(MaskedDNADataModule, fasta=str(genome_file), seq_len=32, batch_size=4, eval_tokens=256,
                             cache_dir=None)
    chosen = []
    for loader in dm.test_dataloader():
        target = torch.cat([b["target"].flatten() for b in loader])
        assert target.numel() == 256
        chosen.append(target)
    for other in chosen[1:]:
        torch.testing.assert_close(other, chosen[0])
    frac = (chosen[0] != IGNORE_INDEX).float().mean()
    assert 0.05 < frac < 0.3
    train = next(iter(dm.train_dataloader()))
    assert train["input"].shape == (4, 32) and (train["input"] == dm.mask_id).any()
    with pytest.raises(PosencError, match="kmer_stride equal to"):
        flat_dm(MaskedDNADataModule, fasta=str(genome_file), kmer=3, kmer_stride=1, cache_dir=None)


def classify(tmp_path, **kw):
    from datamodules import ClassificationDataModule

    return flat_dm(ClassificationDataModule, **{"seq_len": 16, "batch_size": 4,
                                                "cache_dir": str(tmp_path / "cache"), **kw})


def test_classification_from_labels_file_and_class_fastas(tmp_path):
    recs = {f"s{i}": random_bases(20 + i, i) for i in range(20)}
    fasta = write_fasta(tmp_path / "seqs.fa", recs)
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(f"s{i},{'ab'[i % 2]}\n" for i in range(20)))
    dm = classify(tmp_path, fasta=str(fasta), labels=str(tmp_path / "labels.csv"), split=(0.6, 0.2, 0.2))
    assert dm.class_names == ["a", "b"] and dm.num_classes == 2
    assert sum(len(s) for s in dm.sets.values()) == 20
    names = [set(s.names) for s in dm.sets.values()]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == (4, 16) and batch["label"].shape == (4,)
    tests = dm.test_dataloader()
    assert [next(iter(t))["tokens"].shape[1] for t in tests] == [16, 32, 64]
    long = next(iter(tests[-1]))["tokens"]
    assert (long == dm.pad_id).any()  # sequences shorter than the test length are padded
    a = write_fasta(tmp_path / "a.fa", {f"a{i}": random_bases(30, i) for i in range(10)})
    b = write_fasta(tmp_path / "b.fa", {f"b{i}": random_bases(30, 50 + i) for i in range(10)})
    dm2 = classify(tmp_path, class_fastas={"x": str(a), "y": str(b)}, split=(0.6, 0.2, 0.2))
    assert dm2.class_names == ["x", "y"] and sum(len(s) for s in dm2.sets.values()) == 20


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        ("id,label\ns0,a\nchrX,b\n",
         r"labels\.csv: 1 id\(s\) not among the records of .*seqs\.fa, e\.g\. \['chrX'\]"),
        ("name,class\ns0,a\n", r"labels\.csv: expected a header with columns 'id' and 'label'"),
        ("id,label\ns0,a\ns0,b\n", r"labels\.csv: line 3 repeats id 's0'"),
        ("id,label\ns0,a\ns1,a\n", r"labels\.csv: needs at least two classes"),
        (None, r"labels\.csv: labels file not found"),
    ],
)
def test_bad_labels_file(tmp_path, labels, match):
    fasta = write_fasta(tmp_path / "seqs.fa", {f"s{i}": random_bases(30, i) for i in range(4)})
    if labels is not None:
        (tmp_path / "labels.csv").write_text(labels)
    with pytest.raises(PosencError, match=match):
        classify(tmp_path, fasta=str(fasta), labels=str(tmp_path / "labels.csv"))


def test_demo_windows_are_centred_on_planted_starts_and_read_on_the_gene_strand(tmp_path):
    seq = list(random_bases(6000, 7).replace("ATG", "ACG"))
    genes = []
    for n, p in enumerate(range(300, 5700, 600)):  # every other gene on the − strand
        if n % 2 == 0:
            seq[p : p + 3] = "ATG"
            genes.append({"record": "r", "begin": p + 1, "end": p + 300, "strand": 1,
                          "partial_begin": False, "partial_end": False})
        else:
            seq[p - 2 : p + 1] = "CAT"  # ATG read on the − strand, start codon's first base at p
            genes.append({"record": "r", "begin": p - 299, "end": p + 1, "strand": -1,
                          "partial_begin": False, "partial_end": False})
    genome = read_fasta(write_fasta(tmp_path / "g.fa", {"r": "".join(seq)}))
    regions = {"train": [(0, 4000)], "val": [(4000, 5000)], "test": [(5000, 6000)]}
    sets = demo_gene_starts(genome, genes, regions, window=64, min_distance=100)
    for s in sets.values():
        rows = [np.asarray(s.codes[a:b]) for a, b in zip(s.starts, s.ends, strict=True)]
        pos = [r for r, y in zip(rows, s.labels, strict=True) if y == 1]
        assert pos and all(r[32:35].tolist() == [0, 3, 2] for r in pos)  # ATG at the centre
        assert (s.labels == 0).sum() == len(pos)  # as many background windows
    assert [int((s.labels == 1).sum()) for s in sets.values()] == [7, 1, 1]  # starts 300, 900, …, 5100


def test_kmer_baseline_separates_classes_that_differ_in_composition(tmp_path):
    from pipelines.tasks.dna.classify import KmerBaseline

    rng = np.random.default_rng(0)
    recs = {f"s{i}": "".join(rng.choice(list("ACGT" if i % 2 else "AAAT"), size=100)) for i in range(60)}
    fasta = write_fasta(tmp_path / "seqs.fa", recs)
    (tmp_path / "labels.csv").write_text("id,label\n" + "".join(f"s{i},{'ab'[i % 2]}\n" for i in range(60)))
    dm = classify(tmp_path, fasta=str(fasta), labels=str(tmp_path / "labels.csv"), split=(0.5, 0.25, 0.25))

    class Trainer:
        datamodule, loggers = dm, []

    base = KmerBaseline(k=2)
    base.on_test_end(Trainer(), None)
    assert base.results["baseline/kmer2_auroc"] == 1.0 and base.results["baseline/kmer2_acc"] == 1.0
    x, y = base.features(dm.sets["test"], dm)
    assert x.shape == (len(y), 16) and np.allclose(x.sum(1), 1.0)
