"""Labelled sequences for classification (Lightning-free): a labels file, one FASTA per class, or a
demo built from a real genome, and the dataset that crops them to a length.

A :class:`SampleSet` holds sequences as ``codes[starts[i]:ends[i]]`` with an integer class each;
the codes may be the memory-mapped genome itself (one sample per record) or a small array built
for the demo.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules.dna.fasta import PAD_CODE, Genome
from datamodules.dna.tokenize import KmerTokenizer, reverse_complement
from datamodules.dna.windows import WorkerRNG, _MemmapPickling
from posenc import PosencError

SPLITS = ("train", "val", "test")


@dataclass
class SampleSet:
    """Sequences ``codes[starts[i]:ends[i]]`` with class ``labels[i]`` and a name each."""

    codes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    labels: np.ndarray
    names: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, idx: np.ndarray) -> SampleSet:
        idx = np.asarray(idx, dtype=np.int64)
        return SampleSet(self.codes, self.starts[idx], self.ends[idx], self.labels[idx],
                         [self.names[i] for i in idx.tolist()])


def read_labels(path: str | Path) -> dict[str, str]:
    """``{id: label}`` from a CSV/TSV file with a header naming columns ``id`` and ``label``.

    Raises:
        PosencError: naming the file (and line) for a missing file, missing columns, an empty
            field, or a repeated id.
    """
    path = Path(path)
    if not path.is_file():
        raise PosencError(f"{path}: labels file not found")
    with open(path, newline="", encoding="utf-8") as fh:
        head = fh.readline()
        fh.seek(0)
        reader = csv.DictReader(fh, delimiter="\t" if "\t" in head else ",")
        cols = [c.strip().lower() for c in reader.fieldnames or []]
        if "id" not in cols or "label" not in cols:
            raise PosencError(f"{path}: expected a header with columns 'id' and 'label', found {cols}")
        reader.fieldnames = cols
        out: dict[str, str] = {}
        for n, row in enumerate(reader, start=2):
            rid, label = (row.get("id") or "").strip(), (row.get("label") or "").strip()
            if not rid or not label:
                raise PosencError(f"{path}: line {n} has an empty id or label")
            if rid in out:
                raise PosencError(f"{path}: line {n} repeats id {rid!r}")
            out[rid] = label
    if not out:
        raise PosencError(f"{path}: no labelled ids")
    return out


def samples_from_labels(
    genome: Genome, labels: dict[str, str], labels_path: Path
) -> tuple[SampleSet, list[str]]:
    """One sample per record named in ``labels``; every labelled id must be a record."""
    missing = [rid for rid in labels if rid not in set(genome.ids)]
    if missing:
        raise PosencError(f"{labels_path}: {len(missing)} id(s) not among the records of {genome.source}, "
                          f"e.g. {missing[:3]} (records: {genome.ids[:3]})")
    classes = sorted(set(labels.values()))
    if len(classes) < 2:
        raise PosencError(f"{labels_path}: needs at least two classes, found only {classes}")
    idx = [genome.ids.index(rid) for rid in labels]
    y = np.array([classes.index(labels[genome.ids[i]]) for i in idx], dtype=np.int64)
    names = [genome.ids[i] for i in idx]
    return SampleSet(genome.codes, genome.starts[idx], genome.ends[idx], y, names), classes


def samples_from_genomes(genomes: dict[str, Genome]) -> tuple[SampleSet, list[str]]:
    """Every record of ``genomes[class]`` is a sample of that class (one FASTA per class)."""
    classes = sorted(genomes)
    if len(classes) < 2:
        raise PosencError(f"class_fastas needs at least two classes, got {classes}")
    codes = np.concatenate([np.asarray(genomes[c].codes) for c in classes])
    shift = np.cumsum([0] + [len(genomes[c].codes) for c in classes])
    starts = np.concatenate([genomes[c].starts + s for c, s in zip(classes, shift[:-1], strict=True)])
    ends = np.concatenate([genomes[c].ends + s for c, s in zip(classes, shift[:-1], strict=True)])
    y = np.concatenate([np.full(len(genomes[c].ids), k) for k, c in enumerate(classes)]).astype(np.int64)
    names = [f"{c}:{rid}" for c in classes for rid in genomes[c].ids]
    return SampleSet(codes, starts, ends, y, names), classes


def split_samples(
    samples: SampleSet, fractions: tuple[float, float, float], seed: int
) -> dict[str, SampleSet]:
    """Stratified seeded split of the samples into disjoint train/val/test sets."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[int]] = {s: [] for s in SPLITS}
    for k in np.unique(samples.labels):
        idx = rng.permutation(np.flatnonzero(samples.labels == k))
        n_train, n_val = round(fractions[0] * len(idx)), round(fractions[1] * len(idx))
        parts["train"] += idx[:n_train].tolist()
        parts["val"] += idx[n_train : n_train + n_val].tolist()
        parts["test"] += idx[n_train + n_val :].tolist()
    for name, idx in parts.items():
        if not idx:
            raise PosencError(f"the {name} split has no samples ({len(samples)} in all); add sequences")
    return {name: samples.subset(np.sort(idx)) for name, idx in parts.items()}


def fold_samples(samples: SampleSet, folds: int, fold: int, val_fraction: float,
                 seed: int) -> dict[str, SampleSet]:
    """K-fold cross-validation: fold ``fold`` of ``folds`` stratified folds is the test set, and
    ``val_fraction`` of the other folds (stratified) the validation set; the rest is train.

    Each class's samples are shuffled by ``seed`` and dealt round-robin into the folds (so every
    fold holds each class's share, give or take one sample); validation is the first
    ``round(val_fraction · n)`` of each class's samples outside the test fold, in the same shuffled
    order. The K test folds of one seed are disjoint and cover every sample once; another seed deals
    other folds (repeated cross-validation).

    Raises:
        PosencError: a class with fewer samples than folds, or a split left empty.
    """
    rng = np.random.default_rng(seed)
    parts: dict[str, list[int]] = {s: [] for s in SPLITS}
    for k in np.unique(samples.labels):
        idx = rng.permutation(np.flatnonzero(samples.labels == k))
        if len(idx) < folds:
            raise PosencError(f"class {k} has {len(idx)} sample(s), fewer than the {folds} folds; "
                              f"add sequences or lower samples.folds")
        in_test = np.arange(len(idx)) % folds == fold
        rest = idx[~in_test]
        n_val = round(val_fraction * len(rest))
        parts["test"] += idx[in_test].tolist()
        parts["val"] += rest[:n_val].tolist()
        parts["train"] += rest[n_val:].tolist()
    for name, idx in parts.items():
        if not idx:
            raise PosencError(f"the {name} split of fold {fold}/{folds} has no samples ({len(samples)} in "
                              f"all); add sequences or change samples.val_fraction")
    return {name: samples.subset(np.sort(idx)) for name, idx in parts.items()}


def demo_gene_starts(
    genome: Genome, genes: list[dict], regions: dict[str, list[tuple[int, int]]], window: int,
    min_distance: int = 100, seed: int = 0,
) -> dict[str, SampleSet]:
    """Demo task on a real genome: windows of ``window`` bases centred on a predicted translation
    start, read on the gene's strand (class ``gene_start``), vs. as many windows centred on random
    positions of a random strand at least ``min_distance`` bases from every predicted start
    (class ``background``); every window lies inside one split region (no leakage between splits).
    """
    offset = dict(zip(genome.ids, genome.starts.tolist(), strict=True))
    starts = [(offset[g["record"]] + (g["begin"] - 1 if g["strand"] > 0 else g["end"] - 1), int(g["strand"]))
              for g in genes if not (g["partial_begin"] if g["strand"] > 0 else g["partial_end"])]
    known = np.sort(np.array([p for p, _ in starts] + [-(10**12), 10**15], dtype=np.int64))
    rng, half, out = np.random.default_rng(seed), window // 2, {}
    for name in SPLITS:
        spans = [(a, b) for a, b in regions[name] if b - a >= window]
        seqs = [(p - half if s > 0 else p - half + 1, s, 1) for p, s in starts]  # start codon at `half`
        seqs = [(lo, s, y) for lo, s, y in seqs if any(a <= lo and lo + window <= b for a, b in spans)]
        n_pos, weights = len(seqs), np.array([b - a - window + 1 for a, b in spans], dtype=np.float64)
        for _ in range(50 * max(1, n_pos)):
            if len(seqs) >= 2 * n_pos:
                break
            a, b = spans[int(rng.choice(len(spans), p=weights / weights.sum()))]
            lo = int(rng.integers(a, b - window + 1))
            j = int(np.searchsorted(known, lo + half))
            if min(known[j] - lo - half, lo + half - known[j - 1]) >= min_distance:
                seqs.append((lo, 1 if rng.random() < 0.5 else -1, 0))
        out[name] = _demo_set(genome, seqs, window, name)
    return out


def _demo_set(genome: Genome, seqs: list[tuple[int, int, int]], window: int, split: str) -> SampleSet:
    """Copy the (start, strand, label) windows into one array, reverse-complementing − strands."""
    if not seqs:
        raise PosencError(f"{genome.source}: the demo's {split} split has no window of {window} bases")
    rows = [np.asarray(genome.codes[lo : lo + window]) for lo, _, _ in seqs]
    rows = [r if s > 0 else reverse_complement(r) for r, (_, s, _) in zip(rows, seqs, strict=True)]
    codes = np.concatenate(rows)
    starts = np.arange(len(rows), dtype=np.int64) * window
    labels = np.array([y for _, _, y in seqs], dtype=np.int64)
    names = [f"{split}{i}:{lo}{'+' if s > 0 else '-'}" for i, (lo, s, _) in enumerate(seqs)]
    return SampleSet(codes, starts, starts + window, labels, names)


class SampleWindows(_MemmapPickling, Dataset):
    """Each sample cropped around its centre to ``tokens`` tokens (padded with PAD if shorter);
    returns ``{"tokens": (T,), "label": ()}``. Reverse complement with probability ``rc_prob``."""

    def __init__(self, samples: SampleSet, tokens: int, tokenizer: KmerTokenizer,
                 rc_prob: float = 0.0, seed: int = 0) -> None:
        self.codes, self.starts, self.ends = samples.codes, samples.starts, samples.ends
        self.labels = samples.labels
        self.tok, self.tokens, self.bases = tokenizer, tokens, tokenizer.n_bases(tokens)
        self.rc_prob, self.rng = rc_prob, WorkerRNG(seed)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        a, b = int(self.starts[idx]), int(self.ends[idx])
        lo = a + max(0, (b - a - self.bases) // 2)
        seq = np.full(self.bases, PAD_CODE, dtype=np.uint8)
        part = np.asarray(self.codes[lo : min(b, lo + self.bases)])
        seq[: len(part)] = part
        if self.rc_prob > 0 and self.rng.get().random() < self.rc_prob:
            seq[: len(part)] = reverse_complement(part)
        label = torch.tensor(int(self.labels[idx]))
        return {"tokens": torch.from_numpy(self.tok.encode(seq)), "label": label}
