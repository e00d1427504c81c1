"""Relative encodings whose logit bias depends on the query/key content (Shaw, DeBERTa, Transformer-XL).

All three compute the content×position products on the few *distinct* relative positions first
(a (B, H, Tq, N) table with N ≪ Tk) and then gather them per (i, j) pair, so no (B, H, Tq, Tk, Dh)
tensor is ever built. The bias itself is a dense (B, H, Tq, Tk) tensor (``quadratic_memory``).

Conventions: :func:`posenc.base.relative_distance` gives ``k_pos − q_pos`` = j − i; the papers'
``i − j`` is its negation. Learned tables index integer distances, so Shaw and DeBERTa round
(float) distances to the nearest integer before clipping.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from posenc.absolute import sinusoidal_table
from posenc.base import PosencError, PositionalEncoding, SchemeMeta, relative_distance

_CONTENT_META = SchemeMeta(acts_on=("bias",), quadratic_memory=True, content_bias=True)


# --------------------------------------------------------------------------- pure math
def clipped_bucket(rel: Tensor, offset: int, n_buckets: int) -> Tensor:
    """Table index ``clamp(round(rel) + offset, 0, n_buckets − 1)`` as int64, same shape as ``rel``."""
    return (rel.round() + offset).clamp(0, n_buckets - 1).to(torch.long)


def gather_buckets(table: Tensor, index: Tensor) -> Tensor:
    """Pick ``table[..., i, index[..., i, j]]``: (B, H, Tq, N) × (B', 1, Tq, Tk) → (B, H, Tq, Tk)."""
    lead = torch.broadcast_shapes(table.shape[:-1], index.shape[:-1])  # (B, H, Tq)
    table = table.expand(*lead, table.shape[-1])  # (B, H, Tq, N)
    return table.gather(-1, index.expand(*lead, index.shape[-1]))  # (B, H, Tq, Tk)


def scatter_buckets(weights: Tensor, index: Tensor, n_buckets: int) -> Tensor:
    """Sum ``weights`` (B, H, Tq, Tk) into their buckets ``index`` (B', 1, Tq, Tk) → (B, H, Tq, N)."""
    out = weights.new_zeros(*weights.shape[:-1], n_buckets)  # (B, H, Tq, N)
    return out.scatter_add(-1, index.expand_as(weights), weights)


def unique_distances(rel: Tensor) -> tuple[Tensor, Tensor]:
    """Distinct values (U,) of ``rel`` and, per element, the index of its value (same shape, int64).

    For contiguous positions U = Tq + Tk − 1; functions of the distance are evaluated on U values.
    """
    values, inverse = torch.unique(rel, return_inverse=True)  # (U,), rel.shape
    return values, inverse


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(N, H·Dh) → (H, N, Dh)."""
    n, width = x.shape
    return x.view(n, n_heads, width // n_heads).transpose(0, 1)  # (H, N, Dh)


def _distance(q: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Signed distances j − i (B', 1, Tq, Tk) on the device of ``q``."""
    return relative_distance(q_pos.to(q.device), k_pos.to(q.device))


def _need_keys(name: str, k: Tensor | None) -> Tensor:
    if k is None:
        raise PosencError(f"{name} is a content bias and needs the keys: call bias(q, q_pos, k_pos, k=k)")
    return k


# --------------------------------------------------------------------------- schemes
class ShawRelative(PositionalEncoding):
    """Relative position representations, "Self-Attention with Relative Position Representations"
    (Shaw, Uszkoreit and Vaswani, 2018).

    Every pair (i, j) has the learned vectors a^K and a^V of the clipped distance
    clip(j − i, −k, k), shared across heads (one instance is shared across layers too):

    * logits: e_ij = q_i·(k_j + a^K_ij)/√Dh, i.e. the bias q_i·a^K_ij/√Dh on top of SDPA's
      q_i·k_j/√Dh (the same 1/√Dh scale as the paper);
    * outputs: z_i = Σ_j w_ij (v_j + a^V_ij), i.e. :meth:`value_term` returns Σ_j w_ij a^V_ij.

    Neither term builds a (B, H, Tq, Tk, Dh) tensor: q·a^K is computed for the 2k + 1 buckets and
    gathered; the weights are scatter-added into their buckets and multiplied by a^V. The metadata
    says ``clipped_relative`` and :meth:`clipped_tables` hands over (k, a^K, a^V), so on CPU over
    contiguous positions the attention runs keys beyond ±k through the fused kernel without
    explicit weights (:mod:`posenc.nn.clipped`).

    Args:
        max_relative: the clipping distance k (16 by default); distances beyond ±k share a vector.
        init_std: standard deviation of the normal initialisation of a^K and a^V.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(
        acts_on=("bias",), quadratic_memory=True, content_bias=True, value_term=True,
        clipped_relative=True,
    )

    def __init__(self, d_model: int, n_heads: int, *, max_relative: int = 16, init_std: float = 0.02) -> None:
        super().__init__(d_model, n_heads)
        if int(max_relative) != max_relative or max_relative < 1:
            raise PosencError(f"ShawRelative max_relative must be a positive integer, got {max_relative!r}")
        if init_std <= 0:
            raise PosencError(f"ShawRelative init_std must be > 0, got {init_std}")
        self.max_relative = int(max_relative)
        n = 2 * self.max_relative + 1
        self.rel_key = nn.Parameter(torch.randn(n, self.head_dim) * init_std)  # a^K (2k+1, Dh)
        self.rel_value = nn.Parameter(torch.randn(n, self.head_dim) * init_std)  # a^V (2k+1, Dh)

    def clipped_tables(self) -> tuple[int, Tensor, Tensor]:
        return self.max_relative, self.rel_key, self.rel_value

    def bucket(self, q: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Index of clip(j − i, −k, k) + k in [0, 2k] as (B', 1, Tq, Tk) int64."""
        return clipped_bucket(_distance(q, q_pos, k_pos), self.max_relative, 2 * self.max_relative + 1)

    def bias(
        self, q: Tensor, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None
    ) -> Tensor | None:
        scores = q @ self.rel_key.to(q.dtype).t() / math.sqrt(self.head_dim)  # (B, H, Tq, 2k+1)
        return gather_buckets(scores, self.bucket(q, q_pos, k_pos))  # (B, H, Tq, Tk)

    def value_term(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        index = self.bucket(weights, q_pos, k_pos)  # (B', 1, Tq, Tk)
        per_bucket = scatter_buckets(weights, index, self.rel_value.shape[0])  # (B, H, Tq, 2k+1)
        return per_bucket @ self.rel_value.to(weights.dtype)  # (B, H, Tq, Dh)


class DeBERTa(PositionalEncoding):
    """Disentangled attention, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention"
    (He, Liu, Gao and Chen, 2021).

    Relative distances are bucketed as in the paper, δ(i, j) = clamp(i − j + k, 0, 2k − 1) with
    k = ``max_relative``. Learned relative embeddings P (2k, D) are projected to per-head
    Q^r = P·W_q^r and K^r = P·W_k^r (H, 2k, Dh); the bias is

        (q_i·K^r_δ(i,j)  +  k_j·Q^r_δ(j,i)) / √Dh      (content→position + position→content).

    Scaling: the paper divides the sum of the three terms (content→content included) by √(3·Dh).
    SDPA already divides q·k by √Dh, so this bias uses the same √Dh: the three terms keep the
    paper's relative weighting and every logit is √3 larger than the paper's (a fixed softmax
    temperature, absorbable by the learned projections). As here one instance is shared by all
    layers, P, W_q^r and W_k^r are shared too (DeBERTa shares P across layers only). The
    projections have no bias term, as in the paper's equations; v2's log-buckets are not used.

    Args:
        max_relative: k, half the number of relative buckets (64 by default, 2k = 128 buckets).
        init_std: standard deviation of the normal initialisation of P.
    """

    meta: ClassVar[SchemeMeta] = _CONTENT_META

    def __init__(self, d_model: int, n_heads: int, *, max_relative: int = 64, init_std: float = 0.02) -> None:
        super().__init__(d_model, n_heads)
        if int(max_relative) != max_relative or max_relative < 1:
            raise PosencError(f"DeBERTa max_relative must be a positive integer, got {max_relative!r}")
        if init_std <= 0:
            raise PosencError(f"DeBERTa init_std must be > 0, got {init_std}")
        self.max_relative = int(max_relative)
        self.rel_embed = nn.Parameter(torch.randn(2 * self.max_relative, d_model) * init_std)  # P (2k, D)
        self.query_proj = nn.Linear(d_model, d_model, bias=False)  # W_q^r
        self.key_proj = nn.Linear(d_model, d_model, bias=False)  # W_k^r

    def relative_projections(self) -> tuple[Tensor, Tensor]:
        """Q^r and K^r as (H, 2k, Dh) each."""
        return split_heads(self.query_proj(self.rel_embed), self.n_heads), split_heads(
            self.key_proj(self.rel_embed), self.n_heads
        )

    def bias(
        self, q: Tensor, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None
    ) -> Tensor | None:
        k = _need_keys("DeBERTa", k)
        rel = _distance(q, q_pos, k_pos)  # (B', 1, Tq, Tk): j − i
        q_r, k_r = (t.to(q.dtype) for t in self.relative_projections())  # (H, 2k, Dh) each
        n = 2 * self.max_relative
        # content→position: q_i·K^r at δ(i, j) = clamp(i − j + k).
        c2p = gather_buckets(q @ k_r.transpose(-1, -2), clipped_bucket(-rel, self.max_relative, n))
        # position→content: k_j·Q^r at δ(j, i) = clamp(j − i + k), gathered along keys then transposed.
        key_table = k @ q_r.transpose(-1, -2)  # (B, H, Tk, 2k)
        index_t = clipped_bucket(rel, self.max_relative, n).transpose(-1, -2)  # (B', 1, Tk, Tq)
        p2c = gather_buckets(key_table, index_t).transpose(-1, -2)  # (B, H, Tq, Tk)
        return (c2p + p2c) / math.sqrt(self.head_dim)


class TransformerXL(PositionalEncoding):
    """Relative attention of "Transformer-XL: Attentive Language Models Beyond a Fixed-Length
    Context" (Dai, Yang, Yang, Carbonell, Le and Salakhutdinov, 2019).

    With r_ij = W_{k,R}·R_{i−j} (R the sinusoidal table of the signed distance i − j, width D,
    projected per head to Dh) the paper's score is (a) q_i·k_j + (b) q_i·r_ij + (c) u·k_j +
    (d) v·r_ij with learned per-head u, v. SDPA computes (a)/√Dh; this bias returns
    ((b) + (c) + (d))/√Dh, so the total equals the reference implementation, which scales all four
    terms by 1/√Dh. (b) + (d) = (q_i + v)·r_ij is computed on the distinct distances only.
    The sinusoid uses the interleaved (sin, cos) layout; the paper's concatenated layout differs by
    a fixed permutation of R's coordinates, which W_{k,R} absorbs.

    Args:
        base: wavelength base of the sinusoidal table (10000 in the paper).
        init_std: standard deviation of the normal initialisation of u and v.
    """

    meta: ClassVar[SchemeMeta] = _CONTENT_META

    def __init__(
        self, d_model: int, n_heads: int, *, base: float = 10000.0, init_std: float = 0.02
    ) -> None:
        super().__init__(d_model, n_heads)
        if d_model % 2:
            raise PosencError(f"TransformerXL needs an even d_model for its sinusoids, got {d_model}")
        if base <= 1:
            raise PosencError(f"TransformerXL base must be > 1, got {base}")
        if init_std < 0:
            raise PosencError(f"TransformerXL init_std must be >= 0, got {init_std}")
        self.base = base
        self.rel_proj = nn.Linear(d_model, d_model, bias=False)  # W_{k,R}
        self.u = nn.Parameter(torch.randn(n_heads, self.head_dim) * init_std)  # content bias (H, Dh)
        self.v = nn.Parameter(torch.randn(n_heads, self.head_dim) * init_std)  # position bias (H, Dh)

    def relative_keys(self, distances: Tensor) -> Tensor:
        """r = W_{k,R}·R_d for distances d = i − j of shape (U,): (H, U, Dh)."""
        table = sinusoidal_table(distances, self.d_model, self.base)  # (U, D)
        return split_heads(self.rel_proj(table.to(self.rel_proj.weight.dtype)), self.n_heads)

    def bias(
        self, q: Tensor, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None
    ) -> Tensor | None:
        k = _need_keys("TransformerXL", k)
        values, inverse = unique_distances(-_distance(q, q_pos, k_pos))  # (U,), (B', 1, Tq, Tk): i − j
        r = self.relative_keys(values).to(q.dtype)  # (H, U, Dh)
        v = self.v.to(q.dtype)[None, :, None, :]  # (1, H, 1, Dh)
        bd = gather_buckets((q + v) @ r.transpose(-1, -2), inverse)  # terms (b)+(d): (B, H, Tq, Tk)
        c = (k * self.u.to(k.dtype)[None, :, None, :]).sum(-1)[:, :, None, :]  # term (c): (B, H, 1, Tk)
        return (bd + c) / math.sqrt(self.head_dim)
