"""LightningDataModule for sequence classification (labels file, one FASTA per class, or a demo)."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from datamodules.dna.annotation import call_genes
from datamodules.dna.fasta import IupacMode, split_regions
from datamodules.dna.genome import report_genome
from datamodules.dna.genome_cache import DEFAULT_CACHE_DIR, cached_json, default_genome, load_genome
from datamodules.dna.samples import (
    SPLITS,
    SampleSet,
    SampleWindows,
    demo_gene_starts,
    read_labels,
    samples_from_genomes,
    samples_from_labels,
    split_samples,
)
from datamodules.dna.tokenize import KmerTokenizer
from datamodules.paths import resolve_path
from datamodules.sampling import EpochSampler, ShardSampler, check_counts, eval_shard, train_shard
from posenc import PosencError

log = logging.getLogger(__name__)


class ClassificationDataModule(L.LightningDataModule):
    """Labelled sequences, cropped around their centre to ``seq_len`` tokens for training and to
    every ``eval_lengths`` entry for testing (one test loader per length; shorter sequences are
    padded). Batches: ``{"tokens": (B, T), "label": (B,)}``.

    Sources, in order of precedence:

    * ``class_fastas: {class: path}`` — every record of each FASTA is a sample of that class;
    * ``fasta`` + ``labels`` — a CSV/TSV with columns ``id,label`` naming records of ``fasta``;
    * neither — the demo: windows centred on translation starts predicted by ``pyrodigal`` on the
      E. coli genome (``gene_start``) vs. random windows ≥ ``demo_min_distance`` from any predicted
      start (``background``); deterministic, split by genome region so no window leaks.

    Args:
        fasta: FASTA/GenBank of the labelled records (or the demo genome).
        labels: CSV/TSV ``id,label`` file for ``fasta``.
        class_fastas: one FASTA per class.
        seq_len: training length in tokens.
        batch_size: sequences per batch.
        split: (train, val, test) fractions of the samples (stratified, seeded) or, for the demo,
            of the genome (regions along each record).
        eval_lengths: test lengths; default 1×, 2×, 4× ``seq_len``.
        kmer: bases per token; kmer_stride: bases between tokens.
        rc_prob: probability of reverse-complementing a training sequence.
        iupac: ambiguity-code handling (``"N"`` or ``"error"``).
        cache_dir: genome / gene-call cache folder.
        demo_min_distance: demo background windows are centred at least this far from a start.
        num_workers: DataLoader workers.
        seed: split, sampling and augmentation seed.
    """

    def __init__(
        self,
        fasta: str | None = None,
        labels: str | None = None,
        class_fastas: dict[str, str] | None = None,
        seq_len: int = 128,
        batch_size: int = 32,
        split: tuple[float, float, float] = (0.8, 0.1, 0.1),
        eval_lengths: list[int] | None = None,
        kmer: int = 1,
        kmer_stride: int = 1,
        rc_prob: float = 0.0,
        iupac: IupacMode = "N",
        cache_dir: str | None = DEFAULT_CACHE_DIR,
        demo_min_distance: int = 100,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_counts(seq_len=(seq_len, 1), batch_size=(batch_size, 1), num_workers=(num_workers, 0),
                     demo_min_distance=(demo_min_distance, 0))
        lengths = list(eval_lengths) if eval_lengths is not None else [seq_len * f for f in (1, 2, 4)]
        if seq_len < 1 or any(b <= a for a, b in zip(lengths, lengths[1:], strict=False)) or not lengths:
            raise PosencError(f"data.eval_lengths must be an increasing list, got {lengths}")
        if labels and not fasta:
            raise PosencError(f"{labels}: a labels file needs data.fasta (the records it names)")
        self.save_hyperparameters()
        self.tokenizer = KmerTokenizer(kmer, kmer_stride)
        self.seq_len, self.batch_size, self.eval_lengths = seq_len, batch_size, lengths
        self.rc_prob, self.num_workers, self.seed = rc_prob, num_workers, seed
        self.cache_dir, self.iupac = cache_dir, iupac
        if class_fastas:
            genomes = {c: self._load(resolve_path(p)) for c, p in class_fastas.items()}
            samples, self.class_names = samples_from_genomes(genomes)
            self.sets = split_samples(samples, split, seed)
        elif labels:
            genome = self._load(resolve_path(fasta))
            samples, self.class_names = samples_from_labels(genome, read_labels(resolve_path(labels)),
                                                            resolve_path(labels))
            self.sets = split_samples(samples, split, seed)
        else:
            self.sets = self._demo(fasta, split, demo_min_distance)
            self.class_names = ["background", "gene_start"]
        for name in SPLITS:
            counts = np.bincount(self.sets[name].labels, minlength=len(self.class_names)).tolist()
            log.info("%s: %d sequences, per class %s", name, len(self.sets[name]),
                     dict(zip(self.class_names, counts, strict=True)))

    def _load(self, path: Path):
        """The (cached) encoded genome of ``path``, with one line on what encoding changed."""
        genome = load_genome(path, self.cache_dir, self.iupac)
        report_genome(genome)
        return genome

    def _demo(
        self, fasta: str | None, split: tuple[float, float, float], min_distance: int
    ) -> dict[str, SampleSet]:
        path = resolve_path(fasta) if fasta else default_genome()
        genome = self._load(path)
        import pyrodigal

        key = genome.cache_path.stem if genome.cache_path is not None else None
        cache = self.cache_dir if key is not None else None
        name = f"{key}.genes-pyrodigal{pyrodigal.__version__}.json"  # shared with the segmentation task
        genes = cached_json(cache, name, lambda: call_genes(genome))
        window = self.tokenizer.n_bases(max(self.eval_lengths))
        return demo_gene_starts(genome, genes, split_regions(genome, split), window, min_distance, self.seed)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def _loader(self, name: str, tokens: int, train: bool = False) -> DataLoader:
        ds = SampleWindows(self.sets[name], tokens, self.tokenizer, self.rc_prob if train else 0.0, self.seed)
        if train:  # a fresh seeded shuffle each epoch, one shard per rank under DDP
            sampler = EpochSampler(len(ds), None, self.seed, *train_shard(self.trainer))
        else:  # in order; disjoint blocks while a DDP trainer validates/tests
            sampler = ShardSampler(len(ds), *eval_shard(self.trainer), what=f"{name} sequences")
        batch = self.batch_size if train else max(1, self.batch_size * self.seq_len // tokens)
        return DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.seq_len, train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.seq_len)

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per evaluation length over the same test sequences."""
        return [self._loader("test", n) for n in self.eval_lengths]
