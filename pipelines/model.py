"""One pre-LN Transformer encoder whose attention takes any ``posenc`` scheme.

The attention calls the scheme's three hooks the same way for every scheme and picks its kernel
from the scheme's metadata only: with no bias, SDPA's fused path; with a bias, SDPA with an additive
mask; with a value-side term, explicit weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc import PosencError, PositionalEncoding


def build_mask(
    bias: Tensor | None,
    key_padding_mask: Tensor | None,
    causal: bool,
    tq: int,
    tk: int,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor | None:
    """Combine a logit bias, a key-padding mask and causality into one additive float mask.

    Masked logits get the dtype's most negative finite value (not −inf), so a row whose keys are
    all masked gives uniform weights instead of NaN.

    Args:
        bias: (B', H', Tq, Tk) additive bias or ``None``.
        key_padding_mask: (B, Tk) bool, True where the key is padding, or ``None``.
        causal: forbid keys after the query.

    Returns:
        ``None`` when nothing is masked or biased (so SDPA keeps its fused path), else a float mask
        broadcastable to (B, H, Tq, Tk).
    """
    if bias is None and key_padding_mask is None and not causal:
        return None
    keep = None
    if key_padding_mask is not None:
        keep = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    if causal:
        tri = torch.ones(tq, tk, dtype=torch.bool, device=device).tril(tk - tq)  # (Tq, Tk)
        keep = tri if keep is None else keep & tri
    base = bias.to(dtype) if bias is not None else torch.zeros((), dtype=dtype, device=device)
    if keep is None:
        return base
    return torch.where(keep, base, torch.finfo(dtype).min)  # (B, H', Tq, Tk)


class Attention(nn.Module):
    """Multi-head self-attention calling ``pe.rotate``, ``pe.bias`` and ``pe.value_term``."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(
        self,
        x: Tensor,
        pos: Tensor,
        pe: PositionalEncoding,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        B, T, C = x.shape
        H = self.n_heads
        q, k, v = self.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
        q, k = pe.rotate(q, k, pos, pos)
        bias = pe.bias(q, pos, pos, k=k)
        drop = self.dropout if self.training else 0.0
        if pe.meta.value_term:
            y = self._explicit(q, k, v, pos, pe, bias, key_padding_mask, causal, drop)
        else:
            fused_causal = causal and bias is None and key_padding_mask is None
            mask = None if fused_causal else build_mask(
                bias, key_padding_mask, causal, T, T, q.dtype, q.device
            )
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=drop, is_causal=fused_causal
            )  # (B, H, T, Dh)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.out(y)

    @staticmethod
    def _explicit(q, k, v, pos, pe, bias, key_padding_mask, causal, drop) -> Tensor:
        """Softmax attention with explicit weights, for schemes with a value-side term."""
        T = q.shape[-2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
        mask = build_mask(bias, key_padding_mask, causal, T, T, scores.dtype, scores.device)
        if mask is not None:
            scores = scores + mask
        w = F.dropout(scores.softmax(dim=-1), p=drop)  # (B, H, T, T)
        y = w @ v  # (B, H, T, Dh)
        extra = pe.value_term(w, pos, pos)
        return y if extra is None else y + extra


class Block(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pos, pe, key_padding_mask, causal) -> Tensor:
        x = x + self.drop(self.attn(self.ln1(x), pos, pe, key_padding_mask, causal))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    """Pre-LN encoder over embeddings ``x`` (B, T, D) at explicit positions ``pos`` (T,) or (B, T).

    Args:
        d_model: width D.
        n_heads: heads H (D must be divisible by H).
        n_layers: number of blocks.
        pe: the positional encoding, built for (d_model, n_heads); one instance shared by all layers.
        d_ff: MLP width (default 4·D).
        dropout: dropout in attention, MLP and on the embedding sum.
        causal: forbid attention to later positions.
        scale_embedding: multiply token embeddings by √D before the encoding is added.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        pe: PositionalEncoding,
        d_ff: int | None = None,
        dropout: float = 0.0,
        causal: bool = False,
        scale_embedding: bool = False,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise PosencError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.pe = pe
        self.causal = causal
        self.scale = math.sqrt(d_model) if scale_embedding else 1.0
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_ff or 4 * d_model, dropout) for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, pos: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Encode ``x`` (B, T, D); outputs at padded positions (mask True) are zero."""
        x = self.drop(self.pe.embed(x * self.scale, pos))  # (B, T, D)
        for block in self.blocks:
            x = block(x, pos, self.pe, key_padding_mask, self.causal)
        x = self.ln_f(x)
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask[..., None], 0.0)
        return x
