"""LightningDataModule for sequence classification (labels file, one FASTA per class, or a demo)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from datamodules.config import Loader
from datamodules.dna.annotation import call_genes
from datamodules.dna.config import CropWindows, GenomeFile, LabelledSamples
from datamodules.dna.fasta import split_regions
from datamodules.dna.genome import report_genome
from datamodules.dna.genome_cache import cached_json, default_genome, load_genome
from datamodules.dna.samples import (
    SPLITS,
    SampleSet,
    SampleWindows,
    demo_gene_starts,
    fold_samples,
    read_labels,
    samples_from_genomes,
    samples_from_labels,
    split_samples,
)
from datamodules.dna.tokenize import KmerTokenizer
from datamodules.paths import resolve_path
from datamodules.sampling import EpochSampler, ShardSampler, eval_shard, train_shard
from posenc import PosencError

log = logging.getLogger(__name__)


def testable_lengths(lengths: list[int], tokenizer: KmerTokenizer,
                     longest: int) -> tuple[list[int], list[int]]:
    """The test lengths (tokens) worth testing on records of at most ``longest`` bases, and those not:
    a length is kept while the previous kept one still cropped some record; past the first length
    whose crop holds every record whole, each longer crop is that same whole record (only more
    padding), so it would repeat that length's numbers under another name."""
    kept: list[int] = []
    for n in lengths:
        if kept and tokenizer.n_bases(kept[-1]) >= longest:
            break
        kept.append(n)
    return kept, [n for n in lengths if n not in kept]


class ClassificationDataModule(L.LightningDataModule):
    """Labelled sequences, cropped around their centre to ``seq_len`` tokens for training and to
    every ``eval_lengths`` entry for testing (one test loader per length; shorter sequences are
    padded). Batches: ``{"tokens": (B, T), "label": (B,)}``.

    Sources, in order of precedence:

    * ``samples.class_fastas: {class: path}`` — every record of each FASTA is a sample of that class;
    * ``genome.fasta`` + ``samples.labels`` — a CSV/TSV with columns ``id,label`` naming records of
      the FASTA;
    * neither — the demo: windows centred on translation starts predicted by ``pyrodigal`` on the
      E. coli genome (``gene_start``) vs. random windows ≥ ``demo_min_distance`` from any predicted
      start (``background``); deterministic, split by genome region so no window leaks.

    Args:
        genome: the labelled records' FASTA/GenBank (or the demo genome), its cache (also of the gene
            calls) and IUPAC handling (:class:`~datamodules.dna.config.GenomeFile`; its
            ``skip_short_records`` does not apply: short sequences are padded).
        samples: labels file or one FASTA per class, the split, the demo's background distance
            (:class:`~datamodules.dna.config.LabelledSamples`).
        windows: training and test crop lengths, tokenization, augmentation
            (:class:`~datamodules.dna.config.CropWindows`).
        loader: sequences per batch, workers, and the split, sampling and augmentation seed
            (:class:`~datamodules.config.Loader`; ``samples_per_epoch``: random training sequences
            per epoch instead of every one once).
    """

    config_groups: ClassVar[dict[str, type]] = {"genome": GenomeFile, "samples": LabelledSamples,
                                                "windows": CropWindows, "loader": Loader}

    def __init__(
        self,
        genome: GenomeFile = GenomeFile(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        samples: LabelledSamples = LabelledSamples(),  # noqa: B008
        windows: CropWindows = CropWindows(),  # noqa: B008
        loader: Loader = Loader(batch_size=32),  # noqa: B008
    ) -> None:
        super().__init__()
        if genome.skip_short_records:
            raise PosencError("data.init_args.genome.skip_short_records: does not apply to classification "
                              "(short sequences are padded)")
        if samples.labels and not genome.fasta:
            raise PosencError(f"{samples.labels}: a labels file needs data.init_args.genome.fasta (the "
                              f"records it names)")
        self.save_hyperparameters()
        for name, value in zip(self.config_groups, (genome, samples, windows, loader), strict=True):
            self.hparams[name] = asdict(value)  # primitive: checkpoints load weights-only
        self.tokenizer = KmerTokenizer(windows.kmer, windows.kmer_stride)
        self.seq_len, self.batch_size, self.eval_lengths = windows.seq_len, loader.batch_size, windows.lengths
        self.rc_prob, self.num_workers, self.seed = windows.rc_prob, loader.num_workers, loader.seed
        self.samples_per_epoch = loader.samples_per_epoch
        self.cache_dir, self.iupac = genome.cache_dir, genome.iupac
        self.sets, self.class_names = self._samples(genome.fasta, samples)
        longest = int((self.sets["test"].ends - self.sets["test"].starts).max())
        self.eval_lengths, self.untested_lengths = testable_lengths(self.eval_lengths, self.tokenizer,
                                                                    longest)
        if self.untested_lengths:  # said, not tested: such a row would repeat the last length's numbers
            log.warning("test lengths %s tokens not tested: the test records are at most %d bases, so "
                        "those crops are the whole records, as at %d tokens", self.untested_lengths,
                        longest, self.eval_lengths[-1])
        for name in SPLITS:
            counts = np.bincount(self.sets[name].labels, minlength=len(self.class_names)).tolist()
            log.info("%s: %d sequences, per class %s", name, len(self.sets[name]),
                     dict(zip(self.class_names, counts, strict=True)))

    def _samples(self, fasta: str | None, samples: LabelledSamples) -> tuple[dict[str, SampleSet], list[str]]:
        """The split sample sets and the class names, from whichever source ``samples`` names."""
        split, seed = samples.split, self.seed
        if samples.class_fastas:
            genomes = {c: self._load(resolve_path(p), repeats=True) for c, p in samples.class_fastas.items()}
            found, names = samples_from_genomes(genomes)
        elif samples.labels:
            labels = resolve_path(samples.labels)
            found, names = samples_from_labels(self._load(resolve_path(fasta)), read_labels(labels), labels)
        elif samples.folds is not None:
            raise PosencError("data.init_args.samples.folds: cross-validation needs labelled samples "
                              "(samples.class_fastas or samples.labels), not the demo")
        else:
            return self._demo(fasta, split, samples.demo_min_distance), ["background", "gene_start"]
        if samples.folds is not None:
            return fold_samples(found, samples.folds, samples.fold, samples.val_fraction, seed), names
        return split_samples(found, split, seed), names

    def _load(self, path: Path, repeats: bool = False):
        """The (cached) encoded genome of ``path``, with one line on what encoding changed; ``repeats``:
        a repeated record id is numbered (a class FASTA's records are samples, not names)."""
        genome = load_genome(path, self.cache_dir, self.iupac, repeats=repeats)
        report_genome(genome)
        return genome

    def _demo(
        self, fasta: str | None, split: tuple[float, float, float], min_distance: int
    ) -> dict[str, SampleSet]:
        path = resolve_path(fasta) if fasta else default_genome()
        genome = self._load(path)
        import pyrodigal  # optional: pyrodigal, gene calling only

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
            sampler = EpochSampler(len(ds), self.samples_per_epoch, self.seed, *train_shard(self.trainer))
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
