"""LightningDataModules serving windows of a genome: the shared base, causal LM and masked LM."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any, ClassVar

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from datamodules.config import Loader
from datamodules.dna.config import GenomeFile, GenomeWindows, Regions
from datamodules.dna.fasta import Genome
from datamodules.dna.genome_cache import default_genome, load_genome
from datamodules.dna.splits import split_records as split_whole_records
from datamodules.dna.splits import split_regions
from datamodules.dna.tokenize import KmerTokenizer
from datamodules.dna.windows import (
    RandomWindows,
    TiledWindows,
    WindowItem,
    aligned_slots,
    aligned_spans,
    check_regions,
    slot_blocks,
)
from datamodules.paths import resolve_path
from datamodules.sampling import EpochSampler, ShardSampler, eval_shard, train_shard
from posenc import PosencError

log = logging.getLogger(__name__)


_REPORTED: set[str] = set()  # genomes already reported by this process


def report_genome(genome: Genome) -> None:
    """One line on what was read and what encoding changed (Lightning's logger, rank 0 only), once
    per process: a datamodule rebuilt with other test lengths reads the same genome again."""
    from lightning.pytorch.utilities import rank_zero_info  # heavy: lightning

    line = (f"{genome.source}: {len(genome.ids)} record(s), {len(genome.codes)} bases "
            f"({'genome cache hit' if genome.cache_hit else 'encoded'}: {genome.cache_path}); "
            f"{genome.report.summary()}")
    key = f"{genome.source}:{len(genome.codes)}"
    if key not in _REPORTED:
        _REPORTED.add(key)
        rank_zero_info(line)

__all__ = ["DNADataModule", "GenomeDataModule", "MaskedDNADataModule"]


class GenomeDataModule(L.LightningDataModule):
    """Windows of a FASTA/GenBank genome split into disjoint train/val/test parts.

    The genome is encoded once into a memory-mapped cache (``cache_dir``) and read eagerly here, so
    bad input fails before any trainer or MLflow run exists. Training windows are drawn at random
    positions each epoch (seeded); validation and test windows tile fixed bases of their split, and
    the test set is evaluated at every length in ``eval_lengths`` over the same bases.

    Which bases are scored: K = ⌈``eval_tokens`` / longest⌉ blocks of the longest evaluation length
    (+ the LM's one extra target base), chosen evenly among the block-sized slots of the split's
    regions — spread over the whole split, not its first bases (``windows.aligned_spans``). A length
    n cuts every block into windows of n tokens, so each length scores exactly the same bases (the
    first base of a block is context only). Validation windows are chosen the same way (blocks of
    ``seq_len``, or of the longest length for :meth:`eval_dataloader`). The kept blocks, in order, are
    grouped into at most ``windows.MAX_BLOCKS`` runs (the bootstrap's test regions): every test and
    ``eval_dataloader`` window knows its run (``TiledWindows.window_blocks``), the same for the same
    bases at every length, and :meth:`block_codes` gives each run's scored bases.
    Lengths (``seq_len``, ``eval_lengths``, ``eval_tokens``) count tokens; with ``kmer=1`` a token
    is a base.

    Args:
        genome: the sequence file, its cache and how it is read (:class:`~datamodules.dna.config.GenomeFile`).
        regions: the train / val / test split (:class:`~datamodules.dna.config.Regions`).
        windows: training and test lengths, tokenization, augmentation
            (:class:`~datamodules.dna.config.GenomeWindows`).
        loader: batch size, random training windows per epoch (distinct; over all processes under
            DDP, each rank training on its own shard, see :mod:`datamodules.sampling`), workers, and
            the seed of the sampler and the augmentation (:class:`~datamodules.config.Loader`).
    """

    next_token: ClassVar[bool] = False  # windows carry one extra (target) token
    config_groups: ClassVar[dict[str, type]] = {"genome": GenomeFile, "regions": Regions,
                                                "windows": GenomeWindows, "loader": Loader}

    def __init__(
        self,
        genome: GenomeFile = GenomeFile(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        regions: Regions = Regions(),  # noqa: B008
        windows: GenomeWindows = GenomeWindows(),  # noqa: B008
        loader: Loader = Loader(batch_size=32, samples_per_epoch=8192),  # noqa: B008
    ) -> None:
        super().__init__()
        if loader.samples_per_epoch is None:
            raise PosencError("data.init_args.loader.samples_per_epoch: must be set for a genome (random "
                              "windows per epoch)")
        self.save_hyperparameters()
        for name, value in (("genome", genome), ("regions", regions), ("windows", windows),
                            ("loader", loader)):
            self.hparams[name] = asdict(value)  # primitive: checkpoints load weights-only
        w = windows
        self.tokenizer = KmerTokenizer(w.kmer, w.kmer_stride)
        self.seq_len, self.batch_size = w.seq_len, loader.batch_size
        self.samples_per_epoch, self.eval_lengths = loader.samples_per_epoch, w.lengths
        self.rc_prob, self.max_n_fraction = w.rc_prob, w.max_n_fraction
        self.num_workers, self.seed = loader.num_workers, loader.seed
        # One pass: read (cache) → report and check → split → every split holds its windows.
        self.fasta = resolve_path(genome.fasta) if genome.fasta else default_genome()
        self.cache_dir = genome.cache_dir
        self.genome: Genome = load_genome(self.fasta, genome.cache_dir, genome.iupac)
        self._check_records(genome.skip_short_records)
        self.regions = (split_regions(self.genome, regions.split, regions.gap) if regions.split_by == "region"
                        else split_whole_records(self.genome, regions.split, regions.split_records))
        extra = int(self.next_token)
        longest = max(self.eval_lengths)
        self.eval_span = self.tokenizer.n_bases(-(-w.eval_tokens // longest) * longest + extra)  # in bases
        need = {name: self.tokenizer.n_bases((longest if name == "test" else w.seq_len) + extra)
                for name in ("train", "val", "test")}  # the test split serves every length
        check_regions(self.regions, need, self.fasta)

    def _check_records(self, skip_short: bool) -> None:
        """Report the genome read (once per process), refuse one without A, C, G or T, and refuse (or with
        ``skip_short`` drop) records shorter than one training window."""
        report_genome(self.genome)
        if not (np.asarray(self.genome.codes) < 4).any():  # codes 0-3 are A, C, G, T
            raise PosencError(f"{self.fasta}: no A, C, G or T in any record (only N): nothing to learn from")
        need = self.tokenizer.n_bases(self.seq_len + int(self.next_token))
        short = [(r, int(n)) for r, n in zip(self.genome.ids, self.genome.lengths, strict=True) if n < need]
        if short and not skip_short:
            rid, n = short[0]
            raise PosencError(f"{self.fasta}: record {rid!r} has {n} bases, shorter than one training "
                              f"window of {need}; use a smaller data.init_args.windows.seq_len or set "
                              f"data.init_args.genome.skip_short_records")
        if short:
            log.warning("%s: %d record(s) shorter than %d bases skipped", self.fasta, len(short), need)
            keep = [i for i, n in enumerate(self.genome.lengths) if n >= need]
            if not keep:
                raise PosencError(f"{self.fasta}: every record is shorter than one window of {need} bases")
            g = self.genome
            self.genome = Genome([g.ids[i] for i in keep], g.codes, g.starts[keep], g.ends[keep], g.report,
                                 g.source, g.cache_path, g.cache_hit)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    @property
    def genome_key(self) -> str | None:
        """Cache key of the genome (prefix for derived caches), ``None`` without a cache."""
        return self.genome.cache_path.stem if self.genome.cache_path is not None else None

    def region_spans(self, name: str, max_tokens: int | None = None) -> list[tuple[int, int]]:
        """The (start, end) genome offsets of region ``name``; with ``max_tokens`` (bases), the blocks
        the test loaders tile within that budget, spread over the region (``max_tokens=self.eval_span``:
        exactly the bases every test length covers)."""
        spans = self.regions[name]
        if max_tokens is not None:
            longest = max(self.eval_lengths)
            tail = self.tokenizer.n_bases(longest + int(self.next_token)) - longest * self.tokenizer.stride
            spans = aligned_spans(spans, max_tokens, longest * self.tokenizer.stride, tail)
        return list(spans)

    def region_codes(self, name: str, max_tokens: int | None = None) -> list:
        """The encoded bases of :meth:`region_spans` as views per segment."""
        return [self.genome.codes[a:b] for a, b in self.region_spans(name, max_tokens)]

    def block_codes(self, name: str) -> list[list[np.ndarray]]:
        """Per bootstrap block of the evaluated span of split ``name`` (numbered as the
        ``window_blocks`` of the test and ``eval_dataloader`` loaders), views of the bases its windows'
        scored tokens start at: each kept slot of the longest length from its first scored token (the
        causal LM's first token of a window is context only) for one slot's worth of tokens. With
        single-base or non-overlapping k-mer tokens these are exactly the bases the windows score."""
        longest = max(self.eval_lengths)
        align = longest * self.tokenizer.stride
        tail = self.tokenizer.n_bases(longest + int(self.next_token)) - align
        slots = aligned_slots(self.regions[name], self.eval_span, align, tail)
        first = self.tokenizer.stride * int(self.next_token)
        ids = slot_blocks(len(slots)).tolist()  # (slots,) block of each kept slot
        out: list[list[np.ndarray]] = [[] for _ in range(max(ids, default=-1) + 1)]
        for (_, p), b in zip(slots, ids, strict=True):
            out[b].append(self.genome.codes[p + first : p + first + align])
        return out

    def make_item(self, tokens: int, train: bool) -> WindowItem:
        """What a window start becomes (subclasses add labels or masking)."""
        return WindowItem(self.genome.codes, tokens, self.tokenizer,
                          rc_prob=self.rc_prob if train else 0.0, seed=self.seed)

    def _loader_kwargs(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "persistent_workers": self.num_workers > 0}

    def train_dataloader(self) -> DataLoader:
        tokens = self.seq_len + int(self.next_token)
        ds = RandomWindows(self.genome.codes, self.regions["train"], self.tokenizer.n_bases(tokens),
                           self.max_n_fraction, self.make_item(tokens, train=True))
        rank, world = train_shard(self.trainer)  # each rank its own shard of the epoch's windows
        sampler = EpochSampler(len(ds), self.samples_per_epoch, self.seed, rank, world)
        return DataLoader(ds, batch_size=self.batch_size, sampler=sampler, drop_last=True,
                          **self._loader_kwargs())

    def _tiled(self, name: str, length: int, align: int | None = None) -> DataLoader:
        tokens = length + int(self.next_token)
        ds = TiledWindows(self.genome.codes, self.regions[name], self.tokenizer.n_bases(tokens),
                          length * self.tokenizer.stride, self.eval_span, self.max_n_fraction,
                          self.make_item(tokens, train=False), align=align)
        batch = max(1, self.batch_size * self.seq_len // length)  # ~constant tokens per batch
        rank, world = eval_shard(self.trainer)  # disjoint blocks under DDP, nothing repeated
        sampler = ShardSampler(len(ds), rank, world, f"{name} windows of {length} tokens")
        return DataLoader(ds, batch_size=batch, sampler=sampler, **self._loader_kwargs())

    def val_dataloader(self) -> DataLoader:
        return self._tiled("val", self.seq_len)

    def eval_dataloader(self, split: str, length: int) -> DataLoader:
        """Windows of ``length`` tokens tiling the evaluated span of ``split`` ("val" or "test"),
        e.g. to choose an inference setting on validation windows as long as the test's."""
        if split not in ("val", "test"):
            raise PosencError(f"eval_dataloader: split must be 'val' or 'test', got {split!r}")
        return self._tiled(split, length, max(self.eval_lengths) * self.tokenizer.stride)

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per evaluation length, all over the same bases of the test split (blocks of the
        longest length spread over it, see the class docstring). Batches hold about
        ``batch_size · seq_len`` tokens (at least one window), so memory per batch stays bounded."""
        align = max(self.eval_lengths) * self.tokenizer.stride  # every length tiles the same bases
        return [self._tiled("test", n, align) for n in self.eval_lengths]


class DNADataModule(GenomeDataModule):
    """Windows for causal (next-token) language modelling: ``seq_len + 1`` tokens per window.

    With ``kmer > 1`` the LM predicts the next k-mer token, so its "bits per base" are bits per
    token (divide by ``kmer_stride`` for bits per base). Arguments: see :class:`GenomeDataModule`.
    """

    next_token = True


class MaskedDNADataModule(GenomeDataModule):
    """Windows for masked language modelling: batches ``{"input", "target"}`` of (B, T) ids.

    BERT corruption (``mask_prob`` of the ACGT tokens chosen; 80% MASK, 10% random, 10% kept),
    random per training window; on val/test the choice is a hash of each token's genome offset, so
    every evaluation length masks exactly the same bases. Overlapping k-mers would leak a masked
    token through its neighbours, so ``kmer_stride`` must equal ``kmer``.

    Args:
        mask_prob: masking probability.
        **kwargs: see :class:`GenomeDataModule`.
    """

    def __init__(self, mask_prob: float = 0.15, **kwargs: Any) -> None:
        w = kwargs.get("windows") or GenomeWindows()
        if w.kmer_stride != w.kmer:
            raise PosencError("masked LM needs non-overlapping k-mers: set "
                              f"data.init_args.windows.kmer_stride equal to data.init_args.windows.kmer (got "
                              f"{w.kmer} and {w.kmer_stride})")
        if not 0.0 < mask_prob < 1.0:
            raise PosencError(f"data.mask_prob must be in (0, 1), got {mask_prob}")
        self.mask_prob = mask_prob
        super().__init__(**kwargs)

    @property
    def mask_id(self) -> int:
        return self.tokenizer.mask_id

    @property
    def bases_per_token(self) -> int:
        return self.tokenizer.k

    def make_item(self, tokens: int, train: bool) -> WindowItem:
        return WindowItem(self.genome.codes, tokens, self.tokenizer, rc_prob=self.rc_prob if train else 0.0,
                          mlm_prob=self.mask_prob, fixed_masks=not train, seed=self.seed)
