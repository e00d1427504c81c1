"""Tokens from base codes: single bases or k-mers with a stride, reverse complement, MLM masking.

Vocabulary (deterministic): the 4^k ACGT k-mers in lexicographic order (id = the k-mer read as a
base-4 number with A0 C1 G2 T3), then ``UNK`` (any k-mer containing N), ``PAD``, ``MASK``. For
``k = 1`` the ids equal the base codes (A0 C1 G2 T3, N→UNK 4, PAD 5) and MASK is 6.

Token ``j`` of a window covers bases ``[j·stride, j·stride + k)``; the model sees it at position
``j`` (token index, not base offset), so positions are contiguous integers for every k and stride.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from datamodules.dna.fasta import N_CODE, PAD_CODE
from posenc import PosencError

IGNORE_INDEX = -100
_RC_CODE = np.arange(256, dtype=np.uint8)
_RC_CODE[:4] = [3, 2, 1, 0]  # A↔T, C↔G; N and PAD map to themselves


def reverse_complement(codes: np.ndarray) -> np.ndarray:
    """Reverse complement of base codes (A↔T, C↔G, N and PAD kept), as a new array."""
    return _RC_CODE[np.asarray(codes)[::-1]]


class KmerTokenizer:
    """k-mer tokens with a stride over base codes (see the module docstring for the vocabulary).

    Args:
        k: bases per token (1..8).
        stride: bases between consecutive tokens (1..k, so every base is covered).
    """

    def __init__(self, k: int = 1, stride: int = 1) -> None:
        if not 1 <= k <= 8:
            raise PosencError(f"kmer must be in 1..8, got {k}")
        if not 1 <= stride <= k:
            raise PosencError(f"kmer_stride must be in 1..kmer={k} (every base covered), got {stride}")
        self.k, self.stride = k, stride
        self.n_kmers = 4**k
        self.unk_id, self.pad_id, self.mask_id = self.n_kmers, self.n_kmers + 1, self.n_kmers + 2
        self._weights = 4 ** np.arange(k - 1, -1, -1, dtype=np.int64)  # (k,) base-4 place values

    @property
    def vocab_size(self) -> int:
        return self.n_kmers + 3

    def vocab(self) -> list[str]:
        """Token strings in id order."""
        return ["".join(p) for p in itertools.product("ACGT", repeat=self.k)] + ["[UNK]", "[PAD]", "[MASK]"]

    def n_bases(self, n_tokens: int) -> int:
        """Bases spanned by ``n_tokens`` consecutive tokens."""
        return (n_tokens - 1) * self.stride + self.k

    def n_tokens(self, n_bases: int) -> int:
        """Whole tokens in ``n_bases`` bases (0 if fewer than k)."""
        return 0 if n_bases < self.k else (n_bases - self.k) // self.stride + 1

    def encode(self, codes: np.ndarray) -> np.ndarray:
        """Token ids (int64, shape (n_tokens(len(codes)),)) of base codes."""
        codes = np.asarray(codes)
        if self.k == 1:
            return codes.astype(np.int64)  # ids equal codes (UNK = N = 4, PAD = 5)
        n = self.n_tokens(len(codes))
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        win = sliding_window_view(codes, self.k)[:: self.stride][:n].astype(np.int64)  # (n, k)
        ids = np.minimum(win, 3) @ self._weights  # (n,)
        ids[(win == N_CODE).any(axis=1)] = self.unk_id
        ids[(win == PAD_CODE).any(axis=1)] = self.pad_id
        return ids

    def decode(self, ids: np.ndarray) -> str:
        """Bases of consecutive tokens (UNK → N·k, PAD → '-'·k); inverse of :meth:`encode` for
        windows of ACGT/N bases whose length is a whole number of tokens."""
        out = []
        for j, t in enumerate(np.asarray(ids).tolist()):
            if t < self.n_kmers:
                kmer = "".join("ACGT"[(t // 4**p) % 4] for p in range(self.k - 1, -1, -1))
            else:
                kmer = {self.unk_id: "N", self.pad_id: "-", self.mask_id: "?"}[t] * self.k
            out.append(kmer if j == 0 else kmer[self.k - self.stride :])
        return "".join(out)


def hash_uniform(keys: np.ndarray, salt: int) -> np.ndarray:
    """Deterministic uniforms in [0, 1) from integer keys (splitmix64), vectorised."""
    z = np.asarray(keys, dtype=np.uint64) + np.uint64((salt * 0x9E3779B97F4A7C15) % 2**64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def mask_tokens(
    ids: np.ndarray, tok: KmerTokenizer, u: np.ndarray, prob: float = 0.15
) -> tuple[np.ndarray, np.ndarray]:
    """BERT-style corruption: of the ACGT tokens, ``prob`` are chosen; of those 80% become MASK,
    10% a random k-mer, 10% stay. UNK/PAD tokens are never chosen.

    Args:
        ids: token ids (T,).
        tok: the tokenizer (mask id, number of k-mers).
        u: uniforms of shape (3, T): choice, corruption kind, random token.
        prob: masking probability.

    Returns:
        ``(inputs, targets)``: corrupted ids, and the original ids at chosen positions with
        :data:`IGNORE_INDEX` elsewhere.
    """
    chosen = (ids < tok.n_kmers) & (u[0] < prob)
    targets = np.where(chosen, ids, IGNORE_INDEX)
    inputs = ids.copy()
    inputs[chosen & (u[1] < 0.8)] = tok.mask_id
    rand = chosen & (u[1] >= 0.8) & (u[1] < 0.9)
    inputs[rand] = np.minimum((u[2][rand] * tok.n_kmers).astype(np.int64), tok.n_kmers - 1)
    return inputs, targets
