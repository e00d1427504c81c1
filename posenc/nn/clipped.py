"""Attention with clipped relative keys and values (Shaw et al., 2018) at the fused kernel's speed.

Shaw's logits are e_ij = q_i·(k_j + a^K_c)/√Dh and its outputs z_i = Σ_j w_ij (v_j + a^V_c) with
c = clip(j − i, −m, m) (m = ``max_relative``). Over contiguous positions the keys of query i fall
in three parts:

* far left, j ≤ i − m: every key has c = −m, so the part is plain attention of q on the shifted
  keys k + a^K_{−m} and values v + a^V_{−m}: queries [m, T) against keys [0, T − m) under a causal
  mask, run by the fused CPU flash kernel, which gives its output and log-sum-exp;
* far right, j ≥ i + m (bidirectional models only): likewise with a^K_{+m}, a^V_{+m}, queries
  [0, T − m) against keys [m, T) under "key ≥ query", i.e. a causal mask on both sequences reversed;
* the band, |j − i| < m (j ≤ i for a causal model): W = 2m − 1 (causal: m) offsets with their own
  vectors, scored explicitly: queries in chunks of C ≥ W − 1 rows, each chunk against the C + W − 1
  keys its rows reach in one small matmul, the band read off the block's skewed diagonal (memory
  O(T·W) per head: no T×T and no T×W×Dh tensor).

The parts are merged by their log-sum-exps: lse = logsumexp over parts, out = Σ_p e^{lse_p − lse} out_p.
In backward the flash kernel's own backward runs for each far part with the *merged* out and lse:
it recomputes P = exp(S − lse) and δ = rowsum(dO ⊙ out), which are the final attention's, so the
partial gradients are exact (as in ring attention); the band's gradients are written out here.
The shifted keys and values enter :class:`ClippedAttention` as inputs, so autograd carries their
gradients to k, v, a^K and a^V through the additions that made them.

Cost: the two causal far parts together visit about the T² pairs of one unmasked attention where the
flash kernel skips masked key blocks. It skips little on short inputs (torch 2.13, 8 heads × 16:
causal over 496 rows took as long as unmasked, over 4080 rows 0.57 of it), so there each far part
costs nearly a whole attention. The band adds O(T·W·Dh).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc import PositionalEncoding
from posenc.nn.toeplitz import _FLASH, _FLASH_BWD


def fits(pe: PositionalEncoding, length: int) -> bool:
    """Whether the flash CPU kernels exist and ``length`` exceeds 2m (both far parts have keys);
    the caller checks the rest (no key padding or dropout, positions in unit steps)."""
    return _FLASH is not None and _FLASH_BWD is not None and length > 2 * pe.clipped_tables()[0]


def clipped_attention(q: Tensor, k: Tensor, v: Tensor, m: int, rel_key: Tensor, rel_value: Tensor,
                      causal: bool) -> Tensor:
    """Attention with clipped relative keys/values over contiguous positions.

    Args:
        q, k, v: (B, H, T, Dh) with T > 2m.
        m: the clipping distance; bucket c + m of ``rel_key``/``rel_value`` holds distance c.
        rel_key, rel_value: a^K and a^V, (2m + 1, Dh), shared by the heads.
        causal: keys after the query are masked (no far-right part; the band stops at j = i).

    Returns:
        (B, H, T, Dh) outputs z_i.
    """
    T = q.shape[-2]
    a_k, a_v = rel_key.to(q.dtype), rel_value.to(q.dtype)
    k_left, v_left = k[:, :, : T - m] + a_k[0], v[:, :, : T - m] + a_v[0]  # (B, H, T − m, Dh)
    k_right = v_right = None
    if not causal:
        k_right, v_right = k[:, :, m:] + a_k[2 * m], v[:, :, m:] + a_v[2 * m]  # (B, H, T − m, Dh)
    width = m if causal else 2 * m - 1  # band offsets o = j − i from 1 − m, buckets from 1
    return ClippedAttention.apply(q, k, v, k_left, v_left, k_right, v_right,
                                  a_k[1 : 1 + width], a_v[1 : 1 + width], m)


class ClippedAttention(torch.autograd.Function):
    """The three parts and their merge; backward through the flash kernel and the explicit band."""

    @staticmethod
    def forward(ctx, q, k, v, k_left, v_left, k_right, v_right, band_k, band_v, m):
        T = q.shape[-2]
        parts = [_band_forward(q, k, v, band_k, band_v, m)]  # (out, lse): (B, H, T, Dh), (B, H, T)
        parts.append(_far(q[:, :, m:], k_left, v_left, before=m, after=0))
        if k_right is not None:
            qr = q[:, :, : T - m].flip(2)  # reversed: "key ≥ query" becomes causal
            out, lse = _far(qr, k_right.flip(2), v_right.flip(2), before=0, after=0)
            parts.append(_pad_rows(out.flip(2), lse.flip(-1), before=0, after=m))
        acc = torch.promote_types(q.dtype, torch.float32)  # the merge in at least float32 (bf16)
        lse = torch.logsumexp(torch.stack([p[1].to(acc) for p in parts]), dim=0)  # (B, H, T)
        out = sum(o * (s - lse).exp().unsqueeze(-1) for o, s in parts).to(q.dtype)  # (B, H, T, Dh)
        ctx.save_for_backward(q, k, v, k_left, v_left, k_right, v_right, band_k, band_v, out, lse)
        ctx.m = m
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, k_left, v_left, k_right, v_right, band_k, band_v, out, lse = ctx.saved_tensors
        m, T = ctx.m, q.shape[-2]
        dout = dout.contiguous()
        dq, dk, dv, d_band_k, d_band_v = _band_backward(q, k, v, band_k, band_v, m, dout, out, lse)
        rows = slice(m, T)  # far-left queries
        dql, dkl, dvl = _FLASH_BWD(_c(dout[:, :, rows]), _c(q[:, :, rows]), k_left, v_left,
                                   _c(out[:, :, rows]), _c(lse[:, :, rows]), 0.0, True)
        dq[:, :, rows] += dql
        dkr = dvr = None
        if k_right is not None:
            rows = slice(0, T - m)  # far-right queries, reversed
            dqr, dkr, dvr = _FLASH_BWD(
                dout[:, :, rows].flip(2), q[:, :, rows].flip(2), k_right.flip(2), v_right.flip(2),
                out[:, :, rows].flip(2), lse[:, :, rows].flip(-1), 0.0, True)
            dq[:, :, rows] += dqr.flip(2)
            dkr, dvr = dkr.flip(2), dvr.flip(2)
        return dq, dk, dv, dkl, dvl, dkr, dvr, d_band_k, d_band_v, None


def _c(x: Tensor) -> Tensor:
    """``x`` contiguous (the flash CPU kernels are handed dense slices)."""
    return x.contiguous()


def _far(q: Tensor, k: Tensor, v: Tensor, before: int, after: int) -> tuple[Tensor, Tensor]:
    """Causal flash attention of the (B, H, T', Dh) slices, rows padded to T (lse −∞ there)."""
    out, lse = _FLASH(_c(q), _c(k), _c(v), 0.0, True)  # (B, H, T', Dh), (B, H, T')
    return _pad_rows(out, lse, before, after)


def _pad_rows(out: Tensor, lse: Tensor, before: int, after: int) -> tuple[Tensor, Tensor]:
    """``before``/``after`` rows of zeros added to ``out`` and of −∞ to ``lse`` (queries without keys)."""
    if not before and not after:
        return out, lse
    out = F.pad(out, (0, 0, before, after))  # (B, H, T, Dh)
    return out, F.pad(lse, (before, after), value=-math.inf)  # (B, H, T)


# ----------------------------------------------------------------------------- the band
# Queries go in chunks of C ≥ W − 1 rows; chunk c meets the L = C + W − 1 keys its rows' bands cover,
# so one small matmul per chunk gives a (C, L) block whose skewed diagonal r, r + w is the band.


class _Band:
    """Chunked views for the band of W offsets o = 1 − m … 1 − m + W − 1 over T rows."""

    def __init__(self, q: Tensor, m: int, width: int) -> None:
        B, H, T, Dh = q.shape
        self.m, self.W, self.T = m, width, T
        self.C = max(width - 1, 16)  # chunk rows: C ≥ W − 1, so a window spills into one next chunk
        self.n = -(-T // self.C)  # chunks
        self.L = self.C + width - 1  # keys per chunk
        i = torch.arange(T, device=q.device)[:, None]  # (T, 1)
        j = i + torch.arange(1 - m, 1 - m + width, device=q.device)  # key of (i, w): (T, W)
        self.outside = (j < 0) | (j >= T)  # (T, W)

    def chunks(self, x: Tensor) -> Tensor:
        """(B, H, T, Dh) → (B, H, n, C, Dh), zero rows appended."""
        B, H, T, Dh = x.shape
        return F.pad(x, (0, 0, 0, self.n * self.C - T)).view(B, H, self.n, self.C, Dh)  # (B, H, n, C, Dh)

    def windows(self, x: Tensor) -> Tensor:
        """(B, H, n, L, Dh) overlapping views: window c row l is x[c·C + l + 1 − m] (zeros outside)."""
        B, H, T, Dh = x.shape
        xp = F.pad(x, (0, 0, self.m - 1, (self.n + 1) * self.C - T - (self.m - 1)))  # (B, H, (n+1)·C, Dh)
        s = xp.stride()
        return xp.as_strided((B, H, self.n, self.L, Dh), (s[0], s[1], self.C * s[2], s[2], s[3]))

    def diagonal(self, full: Tensor) -> Tensor:
        """The (B, H, n, C, W) view ``full[..., r, r + w]`` of a contiguous (B, H, n, C, L) block."""
        s = full.stride()
        return full.as_strided((*full.shape[:3], self.C, self.W), (s[0], s[1], s[2], self.L + 1, 1))

    def take(self, full: Tensor) -> Tensor:
        """(B, H, n, C, L) → the band (B, H, T, W)."""
        B, H = full.shape[:2]
        return self.diagonal(full).reshape(B, H, self.n * self.C, self.W)[:, :, : self.T]  # (B, H, T, W)

    def spread(self, band: Tensor) -> Tensor:
        """The band (B, H, T, W) → a (B, H, n, C, L) block, zero off the band (adjoint of :meth:`take`)."""
        B, H = band.shape[:2]
        full = band.new_zeros(B, H, self.n, self.C, self.L)
        rows = F.pad(band, (0, 0, 0, self.n * self.C - self.T)).view(B, H, self.n, self.C, self.W)
        self.diagonal(full).copy_(rows)
        return full  # (B, H, n, C, L)

    def fold(self, win: Tensor) -> Tensor:
        """Adjoint of :meth:`windows`: (B, H, n, L, Dh) sums back to (B, H, T, Dh)."""
        B, H, n, L, Dh = win.shape
        C = self.C
        buf = win.new_zeros(B, H, n + 1, C, Dh)
        buf[:, :, :n] += win[:, :, :, :C]
        buf[:, :, 1:, : L - C] += win[:, :, :, C:]  # the W − 1 rows each window spills into the next chunk
        return buf.view(B, H, (n + 1) * C, Dh)[:, :, self.m - 1 : self.m - 1 + self.T]  # (B, H, T, Dh)

    def unchunk(self, x: Tensor) -> Tensor:
        """(B, H, n, C, Dh) → (B, H, T, Dh)."""
        B, H, n, C, Dh = x.shape
        return x.reshape(B, H, n * C, Dh)[:, :, : self.T]  # (B, H, T, Dh)


def _band_scores(band: _Band, q: Tensor, k: Tensor, band_k: Tensor) -> Tensor:
    """Scaled logits (B, H, T, W) of the band keys k[i + o] + a^K_o; −∞ where i + o is outside [0, T)."""
    full = band.chunks(q) @ band.windows(k).transpose(-1, -2)  # (B, H, n, C, L)
    scores = band.take(full) + q @ band_k.t()  # (B, H, T, W)
    return (scores / math.sqrt(q.shape[-1])).masked_fill(band.outside, -math.inf)


def _band_forward(q: Tensor, k: Tensor, v: Tensor, band_k: Tensor, band_v: Tensor,
                  m: int) -> tuple[Tensor, Tensor]:
    """The band's normalised output (B, H, T, Dh) and log-sum-exp (B, H, T)."""
    band = _Band(q, m, band_k.shape[0])
    scores = _band_scores(band, q, k, band_k)  # (B, H, T, W)
    lse = scores.logsumexp(-1)  # (B, H, T): finite, the offset 0 is always in the band
    p = (scores - lse.unsqueeze(-1)).exp()  # (B, H, T, W)
    out = band.unchunk(band.spread(p) @ band.windows(v)) + p @ band_v  # (B, H, T, Dh)
    return out, lse


def _band_backward(q, k, v, band_k, band_v, m, dout, out, lse):
    """The band's gradients (dq, dk, dv, da^K, da^V) under the merged ``out`` and ``lse``.

    P = exp(S − lse) on the band, dP_o = dO_i·(v_{i+o} + a^V_o), dS = P ⊙ (dP − rowsum(dO ⊙ out)).
    """
    band = _Band(q, m, band_k.shape[0])
    p = (_band_scores(band, q, k, band_k) - lse.unsqueeze(-1)).exp().to(q.dtype)  # (B, H, T, W)
    d_out = band.chunks(dout)  # (B, H, n, C, Dh)
    dp = band.take(d_out @ band.windows(v).transpose(-1, -2)) + dout @ band_v.t()  # (B, H, T, W)
    delta = (dout * out).sum(-1, keepdim=True)  # rowsum(dO ⊙ O): (B, H, T, 1)
    ds = p * (dp - delta) / math.sqrt(q.shape[-1])  # (B, H, T, W), the logits' scale folded in
    ds_full, p_full = band.spread(ds), band.spread(p)  # (B, H, n, C, L)
    dq = band.unchunk(ds_full @ band.windows(k)) + ds @ band_k  # (B, H, T, Dh)
    dk = band.fold(ds_full.transpose(-1, -2) @ band.chunks(q))  # (B, H, T, Dh)
    dv = band.fold(p_full.transpose(-1, -2) @ d_out)  # (B, H, T, Dh)
    d_band_k = torch.einsum("bhtw,bhtd->wd", ds, q)  # (W, Dh)
    d_band_v = torch.einsum("bhtw,bhtd->wd", p, dout)  # (W, Dh)
    return dq, dk, dv, d_band_k, d_band_v
