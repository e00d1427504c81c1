"""LightningDataModule for per-base gene/codon-frame segmentation of a genome."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from datamodules.cache import file_sha256
from datamodules.dna.annotation import (
    LABEL_NAMES,
    N_LABELS,
    call_genes,
    frame_labels,
    genes_to_cds,
    read_annotation,
)
from datamodules.dna.config import GenomeWindows
from datamodules.dna.genome import GenomeDataModule
from datamodules.dna.genome_cache import cached_array, cached_json
from datamodules.dna.windows import WindowItem
from datamodules.paths import resolve_path
from posenc import PosencError

log = logging.getLogger(__name__)


class SegmentationDataModule(GenomeDataModule):
    """Windows of ``seq_len`` bases with one frame label per base (see ``datamodules.dna.annotation``):
    0 non-coding, 1/2/3 codon frame 0/1/2 on +, 4/5/6 codon frame 0/1/2 on −.

    Labels come from ``annotation`` (GFF3/GTF/BED CDS features) when given; otherwise from genes
    called with ``pyrodigal`` on the genome itself (bacterial gene finding) — then the labels are
    *predictions*, not a curated annotation. Gene calls and labels are cached next to the genome
    cache. Reverse-complement augmentation (``rc_prob``) transforms the labels consistently.
    Batches: ``{"tokens": (B, T), "labels": (B, T)}``.

    Args:
        annotation: GFF3/GTF/BED path (or ``package:<pkg>/<path>``); ``None`` → pyrodigal calls.
        **kwargs: see :class:`~datamodules.dna.genome.GenomeDataModule` (``kmer`` must be 1: labels are
            per base).
    """

    def __init__(self, annotation: str | None = None, **kwargs: Any) -> None:
        w = kwargs.get("windows") or GenomeWindows()
        if w.kmer != 1 or w.kmer_stride != 1:
            raise PosencError("segmentation labels are per base: data.init_args.windows.kmer and "
                              "data.init_args.windows.kmer_stride must be 1")
        super().__init__(**kwargs)
        self.annotation = resolve_path(annotation) if annotation else None
        self.labels = self._build_labels()
        counts = np.bincount(np.asarray(self.labels), minlength=N_LABELS)
        frac = ", ".join(f"{n} {c / counts.sum():.1%}" for n, c in zip(LABEL_NAMES, counts, strict=True))
        log.info("frame labels from %s: %s", self.label_source, frac)
        self.class_fractions = (counts / counts.sum()).tolist()

    @property
    def label_source(self) -> str:
        return str(self.annotation) if self.annotation else "pyrodigal gene calls (predictions)"

    @property
    def num_classes(self) -> int:
        return N_LABELS

    def _build_labels(self) -> np.ndarray:
        size, key = len(self.genome.codes), self.genome_key
        cache = self.cache_dir if key is not None else None
        if self.annotation is not None:
            if not self.annotation.is_file():
                raise PosencError(f"{self.annotation}: annotation file not found")
            tag = file_sha256(self.annotation)[:16]
            # Parse eagerly (cheap) so a bad annotation fails here even when labels are cached.
            cds = read_annotation(self.annotation, self.genome)
            return cached_array(cache, f"{key}.labels-{tag}.u8", size, lambda: frame_labels(self.genome, cds))
        import pyrodigal  # optional: pyrodigal, gene calling only

        tag = f"pyrodigal{pyrodigal.__version__}"
        genes = cached_json(cache, f"{key}.genes-{tag}.json", lambda: call_genes(self.genome))
        self.genes = genes
        log.info("%d genes called by pyrodigal (cached as %s.genes-%s.json)", len(genes), key, tag)
        return cached_array(cache, f"{key}.labels-{tag}.u8", size,
                            lambda: frame_labels(self.genome, genes_to_cds(genes)))

    def make_item(self, tokens: int, train: bool) -> WindowItem:
        return WindowItem(self.genome.codes, tokens, self.tokenizer, labels=self.labels,
                          rc_prob=self.rc_prob if train else 0.0, seed=self.seed)
