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
kernel forward and backward and adds the table's gradient — the sums of dS = P ⊙ (dP − rowsum(dO ⊙ O))
along the anti-diagonals i + j' — computed one block of query rows at a time (memory linear in T).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc import PositionalEncoding, as_batched

_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def grad_rows(batch: int, heads: int, length: int, elements: int = 1 << 20) -> int:
    """Query rows per block of the table's gradient: blocks of ~``elements`` (4 MB in float32) stay
    in the allocator's reused heap instead of being mapped and zeroed afresh on every call."""
    return max(16, elements // max(1, batch * heads * length))


def unit_steps(pos: Tensor) -> bool:
    """Whether every row of ``pos`` (T,) or (B, T) is p0, p0 + 1, …: then distances are j − i."""
    p = as_batched(pos)  # (B', T)
    return p.shape[-1] < 2 or bool((p.diff(dim=-1) == 1).all())


def distance_table(pe: PositionalEncoding, q: Tensor, length: int, causal: bool) -> Tensor:
    """(H', 2T − 1) with ``table[:, x]`` the bias at distance d = T − 1 − x (−∞-like for d > 0 if causal).

    The scheme's own ``bias`` hook is asked for it, with one query at position 0 and keys at the
    distances themselves: for a translation-invariant bias that is the bias at those distances.
    """
    d = (length - 1) - torch.arange(2 * length - 1, device=q.device)  # (2T − 1,) from T − 1 down to 1 − T
    zero = torch.zeros(1, dtype=d.dtype, device=q.device)
    table = pe.bias(q, zero, d)[0, :, 0, :].to(q.dtype)  # (1, H', 1, 2T − 1) → (H', 2T − 1)
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
    """SDPA's fused CPU kernel with a Toeplitz-view bias, differentiable in the table as well."""

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
        mask = toeplitz_view(table, q.shape[-2])
        dout = dout.contiguous()
        dq, dk, dv = _FLASH_BWD(dout, q, k, v, out, lse, 0.0, False, attn_mask=mask)
        dtable = None
        if ctx.needs_input_grad[3]:
            dtable = anti_diagonal_grad(q, k, v, mask, out, lse, dout, ctx.rows)
        return dq, dk, dv, dtable, None


def anti_diagonal_grad(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, out: Tensor, lse: Tensor,
                       dout: Tensor, rows: int) -> Tensor:
    """Gradient of the loss in ``table``: Σ over batch and (i, j') with i + j' = x of dS[b, h, i, j'].

    dS = P ⊙ (dO·vᵀ − rowsum(dO ⊙ O)) with P = exp(q·kᵀ/√Dh + bias − lse), built for ``rows``
    query rows at a time.
    """
    B, H, T, Dh = q.shape
    acc = torch.promote_types(q.dtype, torch.float32)  # sums in at least float32 (bf16 autocast)
    grad = q.new_zeros(mask.shape[1], 2 * T - 1, dtype=acc)  # (H', 2T − 1)
    qs = (q * Dh**-0.5).contiguous()  # (B, H, T, Dh), scaled once
    kt, vt = k.transpose(-1, -2), v.transpose(-1, -2)  # (B, H, Dh, T)
    delta = (dout * out).sum(-1, keepdim=True)  # rowsum(dO ⊙ O) (B, H, T, 1)
    for s in range(0, T, rows):
        e = min(T, s + rows)
        R = e - s
        p = torch.matmul(qs[:, :, s:e], kt)  # (B, H, R, T)
        p += mask[:, :, s:e]
        p -= lse[:, :, s:e, None]
        p.clamp_(min=-87.0).exp_()  # below e^-87 (float32's smallest normal) P is ~0; exp is ~6× slower there
        ds = torch.matmul(dout[:, :, s:e], vt)  # dP (B, H, R, T)
        ds -= delta[:, :, s:e]
        ds *= p
        ds = ds.sum(0, dtype=acc) if mask.shape[1] == H else ds.sum((0, 1), dtype=acc)[None]  # (H', R, T)
        skew = ds.new_zeros(ds.shape[0], R, T + R)  # row r holds dS[:, r, :] from column r on
        skew.as_strided(ds.shape, (R * (T + R), T + R + 1, 1)).copy_(ds)
        grad[:, s:s + T + R - 1] += skew.sum(1)[:, : T + R - 1]  # anti-diagonal x = s + r + j'
    return grad.to(mask.dtype)
