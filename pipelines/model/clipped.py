"""Attention with clipped relative keys and values (Shaw et al., 2018) at the fused kernel's speed.

Shaw's logits are e_ij = q_i·(k_j + a^K_c)/√Dh and its outputs z_i = Σ_j w_ij (v_j + a^V_c) with
c = clip(j − i, −m, m) (m = ``max_relative``). Over contiguous positions the keys of query i fall
in three parts:

* far left, j ≤ i − m: every key has c = −m, so the part is plain attention of q on the shifted
  keys k + a^K_{−m} and values v + a^V_{−m}: queries [m, T) against keys [0, T − m) under a causal
  mask, run by the fused CPU flash kernel, which gives its output and log-sum-exp;
* far right, j ≥ i + m (bidirectional models only): likewise with a^K_{+m}, a^V_{+m}, queries
  [0, T − m) against keys [m, T) under "key ≥ query", i.e. a causal mask on both sequences reversed;
* the band, |j − i| < m (j ≤ i for a causal model): 2m − 1 offsets with their own vectors, scored
  explicitly one offset at a time (memory O(T·Dh), no T×T and no T×m×Dh tensor).

The parts are merged by their log-sum-exps: lse = logsumexp over parts, out = Σ_p e^{lse_p − lse} out_p.
In backward the flash kernel's own backward runs for each far part with the *merged* out and lse:
it recomputes P = exp(S − lse) and δ = rowsum(dO ⊙ out), which are the final attention's, so the
partial gradients are exact (as in ring attention); the band's gradients are written out here.
The shifted keys and values enter :class:`ClippedAttention` as inputs, so autograd carries their
gradients to k, v, a^K and a^V through the additions that made them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from pipelines.model.toeplitz import _FLASH, _FLASH_BWD
from posenc import PositionalEncoding


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


def _offsets(band: Tensor, m: int) -> range:
    """The band's offsets o = j − i: 1 − m … m − 1 (or … 0 for a causal model's m offsets)."""
    return range(1 - m, 1 - m + band.shape[0])


def _shifted(x: Tensor, o: int) -> Tensor:
    """(B, H, T, Dh) with row i holding x[i + o] (zeros where i + o is outside [0, T))."""
    T = x.shape[-2]
    if o >= 0:
        return F.pad(x[:, :, o:], (0, 0, 0, o))  # (B, H, T, Dh)
    return F.pad(x[:, :, : T + o], (0, 0, -o, 0))  # (B, H, T, Dh)


def _band_scores(q: Tensor, k: Tensor, band_k: Tensor, m: int) -> Tensor:
    """Scaled logits (B, H, T, W) of the band keys k[i + o] + a^K_o; −∞ where i + o is outside [0, T)."""
    T, Dh = q.shape[-2:]
    scores = q @ band_k.t()  # q_i·a^K_o: (B, H, T, W)
    for w, o in enumerate(_offsets(band_k, m)):
        scores[..., w] += (q * _shifted(k, o)).sum(-1)
    i = torch.arange(T, device=q.device)[:, None]  # (T, 1)
    j = i + torch.tensor(list(_offsets(band_k, m)), device=q.device)  # (T, W)
    return (scores / math.sqrt(Dh)).masked_fill((j < 0) | (j >= T), -math.inf)


def _band_forward(q: Tensor, k: Tensor, v: Tensor, band_k: Tensor, band_v: Tensor,
                  m: int) -> tuple[Tensor, Tensor]:
    """The band's normalised output (B, H, T, Dh) and log-sum-exp (B, H, T)."""
    scores = _band_scores(q, k, band_k, m)  # (B, H, T, W)
    lse = scores.logsumexp(-1)  # (B, H, T): finite, the offset 0 is always in the band
    p = (scores - lse.unsqueeze(-1)).exp()  # (B, H, T, W)
    out = p @ band_v  # Σ_o p_o a^V_o: (B, H, T, Dh)
    for w, o in enumerate(_offsets(band_v, m)):
        out += p[..., w, None] * _shifted(v, o)
    return out, lse


def _band_backward(q, k, v, band_k, band_v, m, dout, out, lse):
    """The band's gradients (dq, dk, dv, da^K, da^V) under the merged ``out`` and ``lse``.

    P = exp(S − lse) on the band, dP_o = dO_i·(v_{i+o} + a^V_o), dS = P ⊙ (dP − rowsum(dO ⊙ out)).
    """
    T, Dh = q.shape[-2:]
    scale = 1 / math.sqrt(Dh)
    p = (_band_scores(q, k, band_k, m) - lse.unsqueeze(-1)).exp()  # (B, H, T, W)
    dp = dout @ band_v.t()  # dO_i·a^V_o: (B, H, T, W)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)  # (B, H, T, Dh)
    for w, o in enumerate(_offsets(band_v, m)):
        dp[..., w] += (dout * _shifted(v, o)).sum(-1)
    ds = p * (dp - (dout * out).sum(-1, keepdim=True)) * scale  # (B, H, T, W), scale folded in
    for w, o in enumerate(_offsets(band_k, m)):
        dq += ds[..., w, None] * _shifted(k, o)
        _add_shifted(dk, ds[..., w, None] * q, o)
        _add_shifted(dv, p[..., w, None] * dout, o)
    dq += ds @ band_k
    d_band_k = torch.einsum("bhtw,bhtd->wd", ds, q)  # (W, Dh)
    d_band_v = torch.einsum("bhtw,bhtd->wd", p, dout)  # (W, Dh)
    return dq, dk, dv, d_band_k, d_band_v


def _add_shifted(acc: Tensor, x: Tensor, o: int) -> None:
    """acc[i + o] += x[i] for the rows where i + o is inside [0, T) (the adjoint of :func:`_shifted`)."""
    T = acc.shape[-2]
    if o >= 0:
        acc[:, :, o:] += x[:, :, : T - o]
    else:
        acc[:, :, : T + o] += x[:, :, -o:]
