"""Attention with a translation-invariant bias, read from a distance table without an L×L tensor.

A bias that depends on positions only through the signed distance d = k_pos − q_pos
(``SchemeMeta.translation_invariant``) takes at most 2T − 1 distinct values per head over T
contiguous positions. Put the keys in reverse order (j' = T − 1 − j); then query i and reversed key
j' are at distance d = T − 1 − i − j', so the whole (T, T) bias is ``table[i + j']`` with
``table[x] = b(T − 1 − x)``: every row is the previous one shifted by one, and
:meth:`torch.Tensor.as_strided` exposes it as a (1, H, T, T) view of the (H, 2T − 1) table (row
stride 1, column stride 1) without copying anything. SDPA's CPU kernel reads that view as its
additive mask, a block at a time, so the bias costs 8·H·T bytes instead of 4·H·T² and the
attention runs at close to SDPA's unbiased speed at any length. A causal mask is a
translation-invariant bias too (−∞ for d > 0), so it goes into the table.

When the table needs a gradient (T5's learned buckets, a Gaussian prior's learned widths, DPB's
MLP) SDPA would fall back to its explicit kernel; :class:`ToeplitzSDPA` instead runs the fused
kernel forward and one blocked backward (:func:`blocked_backward`) that computes P and
dS = P ⊙ (dP − rowsum(dO ⊙ O)) once per block of query rows and takes all four gradients from them:
q, k, v and the table's (the sums of dS along the anti-diagonals i + j'); memory linear in T (timings
in docs/performance.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc import PositionalEncoding, as_batched

_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


# P below e^-60 (~9e-27, next to a row maximum of 1) is set to exactly 0 in the backward: P ⊙ dP and
# the matmuls over such P otherwise make subnormal floats, which Intel CPUs handle in microcode (with a
# Gaussian prior's −d²/σ² bias most of P is there: its training step ran at 0.15× NoPE on an Intel
# Xeon, against 0.80× on AMD EPYC, where subnormals cost little). e^-87 was the floor before.
P_FLOOR = -60.0


def grad_rows(batch: int, heads: int, length: int, elements: int = 1 << 19) -> int:
    """Query rows per block of the backward: blocks of ~``elements`` (2 MB in float32) stay in the
    allocator's reused heap instead of being mapped and zeroed afresh on every call (blocks of 8, 16
    and 32 rows were timed at 8×512 and 1×4096 on a 2-core AMD EPYC: 16 was as fast as the best)."""
    return max(16, elements // max(1, batch * heads * length))


def unit_steps(pos: Tensor) -> bool:
    """Whether every row of ``pos`` (T,) or (B, T) is p0, p0 + 1, …: then distances are j − i."""
    p = as_batched(pos)  # (B', T)
    return p.shape[-1] < 2 or bool((p.diff(dim=-1) == 1).all())


def bias_at_distances(pe: PositionalEncoding, q: Tensor, d: Tensor) -> Tensor:
    """(H', len(d)): the scheme's bias at signed distances ``d`` (k_pos − q_pos), asked of its own
    ``bias`` hook with one query at position 0 and keys at the distances themselves (for a
    translation-invariant bias, the bias at those distances)."""
    zero = torch.zeros(1, dtype=d.dtype, device=d.device)
    return pe.bias(q, zero, d)[0, :, 0, :]  # (1, H', 1, len(d)) → (H', len(d))


def distance_table(pe: PositionalEncoding, q: Tensor, length: int, causal: bool) -> Tensor:
    """(H', 2T − 1) with ``table[:, x]`` the bias at distance d = T − 1 − x (−∞-like for d > 0 if causal),
    from :func:`bias_at_distances`."""
    d = (length - 1) - torch.arange(2 * length - 1, device=q.device)  # (2T − 1,) from T − 1 down to 1 − T
    table = bias_at_distances(pe, q, d).to(q.dtype)  # (H', 2T − 1)
    if causal:  # keys after the query (d > 0, i.e. x < T − 1) are masked
        masked = torch.arange(2 * length - 1, device=q.device) < length - 1  # (2T − 1,)
        table = torch.where(masked, torch.finfo(q.dtype).min, table)
    return table.contiguous()


def toeplitz_view(table: Tensor, length: int) -> Tensor:
    """The (1, H', T, T) bias ``view[0, h, i, j'] = table[h, i + j']`` sharing ``table``'s storage."""
    heads, width = table.shape
    return table.as_strided((1, heads, length, length), (heads * width, width, 1, 1))


def toeplitz_attention(q: Tensor, k: Tensor, v: Tensor, table: Tensor, drop: float,
                       rows: int) -> Tensor:
    """Attention of (B, H, T, Dh) q, k, v with the bias in ``table`` (see :func:`distance_table`).

    ``rows``: query rows per block when the table's gradient is computed (memory per block).
    """
    T = q.shape[-2]
    k, v = k.flip(2), v.flip(2)  # keys in reverse order: the bias becomes a Toeplitz view
    learned = torch.is_grad_enabled() and table.requires_grad
    if learned and not drop and _FLASH_BWD is not None and q.device.type == "cpu":
        return ToeplitzSDPA.apply(q, k, v, table, rows)
    mask = toeplitz_view(table, T)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)  # (B, H, T, Dh)


class ToeplitzSDPA(torch.autograd.Function):
    """SDPA's fused CPU kernel with a Toeplitz-view bias forward; one blocked backward for all four
    gradients (q, k, v and the table), so P and dS are computed once."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, table: Tensor, rows: int) -> Tensor:
        mask = toeplitz_view(table, q.shape[-2])
        out, lse = _FLASH(q, k, v, attn_mask=mask)  # (B, H, T, Dh), (B, H, T)
        ctx.save_for_backward(q, k, v, table, out, lse)
        ctx.rows = rows
        return out

    @staticmethod
    def backward(ctx, dout: Tensor):
        q, k, v, table, out, lse = ctx.saved_tensors
        acc = torch.promote_types(q.dtype, torch.float32)  # at least float32 (bf16 autocast)
        ins = (t.to(acc).contiguous() for t in (q, k, v, table, out, lse, dout))  # q and dO come strided
        with torch.autocast(q.device.type, enabled=False):  # matmuls stay in ``acc``
            grads = blocked_backward(*ins, ctx.rows)
        return (*(g.to(t.dtype) for g, t in zip(grads, (q, k, v, table), strict=True)), None)


def blocked_backward(q: Tensor, k: Tensor, v: Tensor, table: Tensor, out: Tensor, lse: Tensor,
                     dout: Tensor, rows: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of ``out = softmax(q·kᵀ/√Dh + table[i + j']) · v`` in q, k, v and ``table``.

    For ``rows`` query rows at a time: P = exp(q·kᵀ/√Dh + bias − lse) and
    dS = P ⊙ (dO·vᵀ − rowsum(dO ⊙ O)); then dv += Pᵀ·dO, dq = dS·k/√Dh, dk += dSᵀ·q/√Dh and the
    table's gradient is the sum of dS over batch and anti-diagonals i + j'. The lse and the rowsum
    ride along as one extra column of q and dO (against a column of ones in k and v), so each is
    subtracted inside its matmul. dS is written straight into a skewed buffer (row r shifted right
    by r), where an anti-diagonal of the block is a column: one sum over rows gives its share.
    """
    B, H, T, Dh = q.shape
    BH, Hp = B * H, table.shape[0]
    mask = toeplitz_view(table, T)  # (1, H', T, T)
    qa, ka_t, da, va_t = _augmented(q, k, v, out, lse, dout)
    ks, qs3, do3 = (t.reshape(BH, T, Dh).contiguous() for t in (k * Dh**-0.5, qa[..., :Dh], dout))
    dq, dk, dv = torch.empty_like(ks), torch.zeros_like(ks), torch.zeros_like(ks)  # (B·H, T, Dh)
    grad = q.new_zeros(Hp, 2 * T - 1)  # (H', 2T − 1)
    for s in range(0, T, rows):
        e = min(T, s + rows)
        R = e - s
        if s == 0 or R != rows:  # a fresh skew buffer; its off-band zeros stay zero between blocks
            skew = q.new_zeros(BH, R, T + R)
            ds = skew.as_strided((BH, R, T), (R * (T + R), T + R + 1, 1))  # dS[:, r, j'] at column r + j'
        p = torch.matmul(qa[:, :, s:e], ka_t)  # q·kᵀ/√Dh − lse (B, H, R, T)
        p += mask[:, :, s:e]
        p = F.threshold_(p, P_FLOOR, -math.inf).exp_().view(BH, R, T)  # exactly 0 below e^P_FLOOR
        torch.mul(torch.matmul(da[:, :, s:e], va_t).view(BH, R, T), p, out=ds)  # P ⊙ (dP − rowsum)
        dv.baddbmm_(p.transpose(-1, -2), do3[:, s:e])
        dq[:, s:e] = torch.bmm(ds, ks)  # (B·H, R, Dh)
        dk.baddbmm_(ds.transpose(-1, -2), qs3[:, s:e])
        per_x = skew.view(B, H, R, T + R).sum((0, 2)) if Hp == H else skew.sum((0, 1))[None]
        grad[:, s:s + T + R - 1] += per_x[:, : T + R - 1]  # anti-diagonal x = s + column
    shape = (B, H, T, Dh)
    return dq.view(shape), dk.view(shape), dv.view(shape), grad


def _augmented(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
               dout: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """[q/√Dh, −lse], [k, 1]ᵀ, [dO, −rowsum(dO ⊙ O)] and [v, 1]ᵀ: their products are
    q·kᵀ/√Dh − lse and dO·vᵀ − rowsum(dO ⊙ O)."""
    ones = q.new_ones(*q.shape[:-1], 1)  # (B, H, T, 1)
    qa = torch.cat([q * q.shape[-1] ** -0.5, -lse[..., None]], -1)  # (B, H, T, Dh + 1)
    ka_t = torch.cat([k, ones], -1).transpose(-1, -2).contiguous()  # (B, H, Dh + 1, T)
    da = torch.cat([dout, -(dout * out).sum(-1, keepdim=True)], -1)  # (B, H, T, Dh + 1)
    va_t = torch.cat([v, ones], -1).transpose(-1, -2).contiguous()  # (B, H, Dh + 1, T)
    return qa, ka_t, da, va_t
