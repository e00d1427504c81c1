"""What the peer tests share (``test_peers.py``, ``test_peers_bias.py``): the peer package or a skip,
float32-rounding comparisons, and an attention run through a peer's rotation or bias with SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posenc.nn import Attention

ULP32 = 6e-8  # float32 unit roundoff: 2^-24


def need(module: str):
    """The peer ``module``, or a skip naming it."""
    return pytest.importorskip(module, reason=f"peer package {module.split('.')[0]} is not installed")


def close32(ours: torch.Tensor, peer: torch.Tensor, ulps: float = 8.0) -> None:
    """Equal to float32 rounding: the peer forms these in float32 (a pow, a divide, a mix: a few ulp
    each; ≤ 5 ulp measured for BLOOM's slopes and HF's PI), posenc in float64."""
    torch.testing.assert_close(ours.double(), peer.double(), rtol=ulps * ULP32, atol=0.0)


def peer_attention(attn: Attention, x, rotate=None, bias=None, causal: bool = False):
    """``attn``'s projections around the peer's rotation or bias and ``F.scaled_dot_product_attention``."""
    B, T, C = x.shape
    H = attn.n_heads
    q, k, v = attn.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
    if rotate is not None:
        q, k = rotate(q, k)
    mask = bias
    if causal:
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        blocked = torch.zeros(T, T).masked_fill(future, float("-inf"))  # (T, T)
        mask = blocked if mask is None else mask + blocked
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh)
    return attn.out(y.transpose(1, 2).reshape(B, T, C))


def e2e(pe, causal: bool = False, T: int = 96):
    torch.manual_seed(0)
    attn = Attention(64, 4, pe=pe, causal=causal).eval()
    x = torch.randn(2, T, 64)
    with torch.no_grad():
        return attn, x, attn(x, torch.arange(T))
