"""Learned position-only biases: a bucket table (T5), an MLP of the distance (DPB) and FIRE.

Each returns a (B', H, Tq, Tk) bias that depends on positions only; SDPA receives it as a dense
L×L mask (``quadratic_memory``). Distances follow :func:`posenc.base.relative_distance`:
``rel = k_pos − q_pos`` = j − i.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.base import PosencError, PositionalEncoding, SchemeMeta, as_batched, relative_distance
from posenc.bias import BiasEncoding
from posenc.relative import unique_distances


# --------------------------------------------------------------------------- pure math
def t5_relative_bucket(
    rel: Tensor, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of the relative position ``rel`` = key − query (Raffel et al., 2020), int64.

    Bidirectional: half the buckets for keys at or before the query (``rel`` ≤ 0), the other half,
    offset by num_buckets/2, for keys after it. Within a half of n buckets, distances below n/2 get
    their own bucket; distances from n/2 to ``max_distance`` share n/2 log-spaced buckets,
    ⌊n/2 + log(d/(n/2)) / log(max_distance/(n/2)) · n/2⌋ (float32, truncated, as the reference
    implementation), and everything farther goes to the last one. Unidirectional: all buckets for
    keys at or before the query; later keys fall in bucket 0. Float distances are rounded first.
    """
    rel = rel.round().to(torch.long)
    offset = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        offset = (rel > 0).to(torch.long) * num_buckets  # keys after the query use the upper half
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    scaled = dist.to(torch.float32).clamp(min=max_exact) / max_exact  # ≥ 1, so the log is ≥ 0
    log_part = torch.log(scaled) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = (max_exact + log_part.to(torch.long)).clamp(max=num_buckets - 1)
    return offset + torch.where(dist < max_exact, dist, large)


def fire_inputs(rel: Tensor, q_pos: Tensor, k_pos: Tensor, c: Tensor, threshold: Tensor) -> Tensor:
    """FIRE's normalised distance ψ(|i − j|) / ψ(max(L, i, j)) with ψ(x) = log(1 + c·x).

    Args:
        rel: signed distances (B', 1, Tq, Tk).
        q_pos, k_pos: positions (T,) or (B, T).
        c, threshold: the positive scalars c and L.

    Returns:
        (B', 1, Tq, Tk) float32; in [0, 1] for non-negative positions. On a causal triangle (j ≤ i)
        it is the paper's ψ(i − j)/ψ(max(L, i)).
    """
    qp = as_batched(q_pos).to(torch.float32)[:, None, :, None]  # (B', 1, Tq, 1)
    kp = as_batched(k_pos).to(torch.float32)[:, None, None, :]  # (B', 1, 1, Tk)
    scale = torch.maximum(torch.maximum(qp, kp), threshold)  # (B', 1, Tq, Tk)
    return torch.log1p(c * rel.abs()) / torch.log1p(c * scale).clamp(min=1e-6)


def _mlp(n_in: int, hidden: int, n_out: int, n_hidden: int, norm: bool) -> nn.Sequential:
    """Linear(n_in, h) then n_hidden − 1 × [LN?, ReLU, Linear(h, h)], then [LN?, ReLU, Linear(h, n_out)]."""
    layers: list[nn.Module] = [nn.Linear(n_in, hidden)]
    for i in range(n_hidden):
        if norm:
            layers.append(nn.LayerNorm(hidden))
        layers += [nn.ReLU(), nn.Linear(hidden, n_out if i == n_hidden - 1 else hidden)]
    return nn.Sequential(*layers)


def inverse_softplus(y: Tensor) -> Tensor:
    """x with softplus(x) = y, for y > 0."""
    return y + torch.log(-torch.expm1(-y))


# --------------------------------------------------------------------------- schemes
class T5Bias(BiasEncoding):
    """Bucketed relative attention bias, "Exploring the Limits of Transfer Learning with a Unified
    Text-to-Text Transformer" (Raffel, Shazeer, Roberts, Lee, Narang, Matena, Zhou, Li and Liu, 2020).

    A learned scalar per (bucket, head) is added to the logits; buckets follow
    :func:`t5_relative_bucket` (the reference bucketing, bidirectional by default). One table is
    shared by all layers, as in T5.

    Args:
        num_buckets: total number of buckets (32), split in two halves when bidirectional.
        max_distance: distance from which everything shares the last bucket (128).
        bidirectional: separate buckets for keys before and after the query (encoder).
        init_std: standard deviation of the normal initialisation of the table.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(d_model, n_heads)
        per_direction = num_buckets // 2 if bidirectional else num_buckets
        if int(num_buckets) != num_buckets or per_direction < 2 or (bidirectional and num_buckets % 2):
            raise PosencError(
                f"T5Bias num_buckets must be an even integer >= 4 (>= 2 one-way), got {num_buckets!r}"
            )
        if max_distance <= per_direction // 2:
            raise PosencError(
                f"T5Bias max_distance must exceed the {per_direction // 2} exact buckets, got {max_distance}"
            )
        if init_std <= 0:
            raise PosencError(f"T5Bias init_std must be > 0, got {init_std}")
        self.num_buckets = int(num_buckets)
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.table = nn.Parameter(torch.randn(self.num_buckets, n_heads) * init_std)  # (buckets, H)

    def distance_bias(self, dist: Tensor) -> Tensor:
        bucket = t5_relative_bucket(
            dist[:, 0], bidirectional=self.bidirectional, num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )  # (B', Tq, Tk)
        return F.embedding(bucket, self.table).permute(0, 3, 1, 2)  # (B', Tq, Tk, H) → (B', H, Tq, Tk)


class DynamicBias(BiasEncoding):
    """Dynamic position bias (DPB) of "CrossFormer: A Versatile Vision Transformer Hinging on
    Cross-scale Attention" (Wang, Yao, Chen, Lin, Cai, He and Liu, 2021), in one dimension.

    An MLP maps the signed distance j − i to one bias per head: Linear(1, h), then three times
    [LayerNorm, ReLU, Linear], the last to H outputs (CrossFormer's layout). It runs on the distinct
    distances only (2T − 1 of them for contiguous positions) and the result is gathered per pair.

    Args:
        hidden: MLP width h (CrossFormer uses D/4; 32 by default here).
        log_scale: feed sign(d)·log(1 + |d|) instead of d (as Swin-V2's log-spaced coordinates),
            which keeps inputs small for long sequences.
    """

    def __init__(self, d_model: int, n_heads: int, *, hidden: int = 32, log_scale: bool = False) -> None:
        super().__init__(d_model, n_heads)
        if int(hidden) != hidden or hidden < 1:
            raise PosencError(f"DynamicBias hidden must be a positive integer, got {hidden!r}")
        self.log_scale = log_scale
        self.mlp = _mlp(1, int(hidden), n_heads, n_hidden=3, norm=True)

    def distance_bias(self, dist: Tensor) -> Tensor:
        values, inverse = unique_distances(dist[:, 0])  # (U,), (B', Tq, Tk)
        x = torch.sign(values) * torch.log1p(values.abs()) if self.log_scale else values
        table = self.mlp(x[:, None].to(self.mlp[0].weight.dtype))  # (U, 1) → (U, H)
        return F.embedding(inverse, table).permute(0, 3, 1, 2)  # (B', Tq, Tk, H) → (B', H, Tq, Tk)


FIRE_PAIRS = 1 << 20  # (query, key) pairs per chunk of FIRE's MLP when no gradient is needed


class FIRE(PositionalEncoding):
    """Functional interpolation, "Functional Interpolation for Relative Positions Improves Long
    Context Transformers" (Li, You, Guruganesh, Ainslie, Ontanon, Zaheer, Sanghai, Yang, Kumar and
    Bhojanapalli, 2023).

    b(i, j) = f_θ(ψ(i − j) / ψ(max(L, i))) with ψ(x) = log(1 + c·x), learnable c > 0 and threshold
    L > 0 (both through softplus), and f_θ an MLP with one hidden ReLU layer of ``hidden`` units and
    H outputs, as in the authors' listing (Linear(1, 32), ReLU, Linear(32, H)). The paper is causal
    (j ≤ i). For this bidirectional encoder the
    input is ψ(|i − j|) / ψ(max(L, i, j)): symmetric in i and j, still in [0, 1] for non-negative
    positions, and equal to the paper's on the causal triangle, so a causal model gets FIRE exactly.
    The bias is therefore direction-blind in an encoder, and, like the paper's, not invariant to
    shifting all positions (only while every position stays below L). The MLP runs on all Tq·Tk
    pairs (its input depends on max(i, j), not on the distance alone).

    Args:
        hidden: width of the hidden layers (32).
        n_hidden: number of hidden layers (1, the authors' listing). posenc before issue 41 built
            2; checkpoints from then load only into ``FIRE(..., n_hidden=2)`` (a clear error says so).
        c_init: initial c (0.1).
        threshold_init: initial L (512); below it the normaliser is the constant ψ(L).
    """

    # Position-only like a BiasEncoding, but a function of (i, j), not of j − i alone.
    meta: ClassVar[SchemeMeta] = replace(BiasEncoding.meta, translation_invariant=False)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        hidden: int = 32,
        n_hidden: int = 1,
        c_init: float = 0.1,
        threshold_init: float = 512.0,
    ) -> None:
        super().__init__(d_model, n_heads)
        for name, value in (("hidden", hidden), ("n_hidden", n_hidden)):
            if int(value) != value or value < 1:
                raise PosencError(f"FIRE {name} must be a positive integer, got {value!r}")
        if c_init <= 0:
            raise PosencError(f"FIRE c_init must be > 0, got {c_init}")
        if threshold_init <= 0:
            raise PosencError(f"FIRE threshold_init must be > 0, got {threshold_init}")
        self.n_hidden = int(n_hidden)
        self.mlp = _mlp(1, int(hidden), n_heads, n_hidden=self.n_hidden, norm=False)
        self.raw_c = nn.Parameter(inverse_softplus(torch.tensor(float(c_init))))
        self.raw_threshold = nn.Parameter(inverse_softplus(torch.tensor(float(threshold_init))))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        """Name the fix when a checkpoint's MLP is deeper or shallower than this one."""
        depth = sum(1 for k in state_dict if k.startswith(f"{prefix}mlp.") and k.endswith(".weight")) - 1
        if depth >= 1 and depth != self.n_hidden:
            raise PosencError(
                f"this FIRE checkpoint has an MLP with {depth} hidden layer(s), this FIRE has "
                f"{self.n_hidden}: build it with FIRE(..., n_hidden={depth}) (posenc before issue 41 "
                "used 2; the authors' listing, now the default, has 1)"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def c(self) -> Tensor:
        return F.softplus(self.raw_c)

    @property
    def threshold(self) -> Tensor:
        return F.softplus(self.raw_threshold)

    def bias(
        self, q: Tensor, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None
    ) -> Tensor | None:
        q_pos, k_pos = q_pos.to(q.device), k_pos.to(q.device)
        rel = relative_distance(q_pos, k_pos)  # (B', 1, Tq, Tk)
        x = fire_inputs(rel, q_pos, k_pos, self.c, self.threshold)  # (B', 1, Tq, Tk)
        x = x[:, 0, :, :, None].to(self.mlp[0].weight.dtype)  # (B', Tq, Tk, 1)
        if torch.is_grad_enabled():  # autograd keeps every activation anyway
            return self.mlp(x).permute(0, 3, 1, 2)  # (B', Tq, Tk, H) → (B', H, Tq, Tk)
        # Without gradients, query rows in chunks of about FIRE_PAIRS pairs: the hidden activations
        # (pairs × hidden, 4× the bias itself at hidden 32, H 8) stay bounded; only the bias is whole.
        rows = max(1, FIRE_PAIRS // max(1, x.shape[0] * x.shape[2]))
        out = torch.cat([self.mlp(x[:, r : r + rows]) for r in range(0, x.shape[1], rows)], dim=1)
        return out.permute(0, 3, 1, 2)  # (B', Tq, Tk, H) → (B', H, Tq, Tk)
