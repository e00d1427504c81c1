"""The encoders ``make bench`` compares: posenc's Transformer, x-transformers, and a hand-written
SDPA encoder, all pre-LN with the same width, depth, heads and MLP, taking embeddings (B, T, D).

Same shapes everywhere: attention width D split into H heads of D/H (x-transformers' own default is
64-wide heads whatever D is, so ``attn_dim_head`` is passed), MLP D → 4·D → D with GELU and biases,
no GLU, one final norm. What x-transformers fixes by construction and cannot be switched: bias-free
q/k/v/out projections and bias-free LayerNorms (a gain only) — posenc pays those additions, which
are ~1/(2·D) of the projection matmuls. :func:`param_groups` counts each part so a test can hold
the implementations to the same shapes.

The hand-written encoder is the physical reference: one fused qkv projection, SDPA, and the
scheme's tensors (sinusoid table, cos/sin, dense bias) computed once per forward and shared by the
layers — what one would write by hand for a single scheme. Its bias is dense, so it needs L×L memory.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc import build_encoding, sinusoidal_table, t5_relative_bucket
from posenc.base import relative_distance
from posenc.kernel_bias import gaussian_prior_bias
from posenc.nn.transformer import Transformer

#: scheme name → posenc spec (the same defaults as configs/posenc/*.yaml).
SCHEMES: dict[str, dict] = {
    "NoPE": {"class_path": "posenc.PositionalEncoding"},
    "Sinusoidal": {"class_path": "posenc.Sinusoidal"},
    "RoPE": {"class_path": "posenc.RoPE"},
    "ALiBi": {"class_path": "posenc.ALiBi"},
    "T5Bias": {"class_path": "posenc.T5Bias"},
    "DynamicBias": {"class_path": "posenc.DynamicBias"},
    "GaussianPrior": {"class_path": "posenc.GaussianPrior"},
    "PeriodicRoPE": {"class_path": "posenc.PeriodicRoPE"},
    "ShawRelative": {"class_path": "posenc.ShawRelative"},
    "DeBERTa": {"class_path": "posenc.DeBERTa"},
}
#: x-transformers Encoder keywords per scheme (absent: x-transformers has no such scheme).
XT_KWARGS: dict[str, dict] = {
    "NoPE": {},
    "Sinusoidal": {},  # the table is added to the input by the wrapper
    "RoPE": {"rotary_pos_emb": True, "rotary_emb_dim": None},  # full head dim, as posenc
    "ALiBi": {"alibi_pos_bias": True},
    "T5Bias": {"rel_pos_bias": True},
    # posenc's DPB MLP: Linear(1, 32), 3 × [LayerNorm, ReLU, Linear]; x-transformers' is D/4 wide
    # (32 at D 128), 2 deep and unnormalised by default: make it the same layers (SiLU stays SiLU).
    "DynamicBias": {"dynamic_pos_bias": True, "dynamic_pos_bias_mlp_depth": 3, "dynamic_pos_bias_norm": True},
}
#: x-transformers keywords that set the shapes posenc uses (their defaults written out where they
#: already agree, so a changed default cannot change the comparison).
XT_SHAPE = {"ff_mult": 4, "ff_glu": False, "ff_no_bias": False, "pre_norm": True, "verbose": False}
XT_NO_FLASH = {"T5Bias", "DynamicBias"}  # x-transformers refuses attn_flash with these


def posenc_model(scheme: str, d: int, h: int, layers: int) -> nn.Module:
    return Transformer(d, h, layers, build_encoding(SCHEMES[scheme], d, h))


class PosencRunner(nn.Module):
    """posenc's Transformer called with explicit positions 0..T-1."""

    def __init__(self, scheme: str, d: int, h: int, layers: int) -> None:
        super().__init__()
        self.net = posenc_model(scheme, d, h, layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x, torch.arange(x.shape[1], device=x.device))


class XTRunner(nn.Module):
    """x-transformers' Encoder (optionally ``attn_flash``); absolute schemes add the sinusoid table."""

    def __init__(self, scheme: str, d: int, h: int, layers: int, flash: bool) -> None:
        super().__init__()
        from x_transformers import Encoder  # optional: x_transformers

        kwargs = dict(XT_KWARGS[scheme])
        if "rotary_emb_dim" in kwargs:
            kwargs["rotary_emb_dim"] = d // h
        self.absolute = scheme == "Sinusoidal"
        self.net = Encoder(dim=d, depth=layers, heads=h, attn_dim_head=d // h, attn_flash=flash,
                           **XT_SHAPE, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        if self.absolute:
            pos = torch.arange(x.shape[1], device=x.device)
            x = x + sinusoidal_table(pos, x.shape[-1]).to(x.dtype)  # (T, D)
        return self.net(x)


class _HandLayer(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None, mask: Tensor | None) -> Tensor:
        B, T, C = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, T, 3, self.h, C // self.h)  # (B, T, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
        if rope is not None:
            q, k = rotate_half(q, *rope), rotate_half(k, *rope)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


def rotate_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """GPT-NeoX rotation of (B, H, T, Dh) by cos/sin (T, Dh/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class HandEncoder(nn.Module):
    """Minimal SDPA encoder for one scheme; ``bias_fn(dist (T, T)) → (H, T, T)`` for a bias scheme."""

    def __init__(self, d: int, h: int, layers: int, kind: str = "none",
                 bias_fn: Callable[[Tensor], Tensor] | None = None, inv_freq: Tensor | None = None) -> None:
        super().__init__()
        self.kind, self.bias_fn, self.d = kind, bias_fn, d
        self.layers = nn.ModuleList(_HandLayer(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        if inv_freq is not None:
            self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        pos = torch.arange(T, device=x.device)
        rope = mask = None
        if self.kind == "absolute":
            x = x + sinusoidal_table(pos, self.d).to(x.dtype)
        elif self.kind == "rope":
            ang = pos[:, None].float() * self.inv_freq  # (T, Dh/2)
            rope = (ang.cos(), ang.sin())
        elif self.kind == "bias":  # 4-D: SDPA's CPU kernel takes a 3-D (H, T, T) mask ~6× slower
            mask = self.bias_fn(relative_distance(pos, pos)[0, 0]).to(x.dtype)[None]  # (1, H, T, T)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return self.ln_f(x)


def hand_model(scheme: str, d: int, h: int, layers: int, pe=None) -> HandEncoder | None:
    """The hand-written encoder for ``scheme``, or ``None`` where there is no plain-SDPA form.

    Learned scheme parameters (T5 table, Gaussian widths, DPB MLP) come from ``pe`` when given,
    else from a freshly built posenc scheme; only the formulas are written here.
    """
    pe = pe if pe is not None else build_encoding(SCHEMES[scheme], d, h)
    if scheme == "NoPE":
        return HandEncoder(d, h, layers)
    if scheme == "Sinusoidal":
        return HandEncoder(d, h, layers, "absolute")
    if scheme in ("RoPE", "PeriodicRoPE"):
        return HandEncoder(d, h, layers, "rope", inv_freq=pe.inv_freq)
    if scheme in ("ALiBi", "T5Bias", "GaussianPrior", "DynamicBias"):
        return HandEncoder(d, h, layers, "bias", bias_fn=_bias_fn(scheme, pe, h))
    return None  # content biases (Shaw, DeBERTa) have no dense position-only form


def _bias_fn(scheme: str, pe, h: int) -> Callable[[Tensor], Tensor]:
    """dist (T, T) → (H, T, T), written directly from each paper's formula."""

    if scheme == "ALiBi":
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)])
        return lambda dist: -slopes[:, None, None] * dist.abs()
    if scheme == "T5Bias":
        table = pe.table  # (buckets, H)
        return lambda dist: table[t5_relative_bucket(dist)].permute(2, 0, 1)
    if scheme == "GaussianPrior":
        return lambda dist: gaussian_prior_bias(dist[None, None], pe.mu, pe.sigma)[0]
    mlp = pe.mlp  # DynamicBias: the MLP on the 2T − 1 distinct distances, gathered per pair

    def dynamic(dist: Tensor) -> Tensor:
        T = dist.shape[-1]
        table = mlp(torch.arange(-(T - 1), T, dtype=torch.float32)[:, None])  # (2T−1, H)
        return table[(dist + T - 1).long()].permute(2, 0, 1)  # (H, T, T)

    return dynamic


def build(impl: str, scheme: str, d: int, h: int, layers: int) -> nn.Module | None:
    """One encoder by implementation name (``posenc``, ``xt``, ``xt-flash``, ``sdpa``) or ``None``."""
    if impl == "posenc":
        return PosencRunner(scheme, d, h, layers)
    if impl in ("xt", "xt-flash"):
        if scheme not in XT_KWARGS or (impl == "xt-flash" and scheme in XT_NO_FLASH):
            return None
        return XTRunner(scheme, d, h, layers, flash=impl == "xt-flash")
    if impl == "sdpa":
        return hand_model(scheme, d, h, layers)
    raise ValueError(f"unknown implementation {impl!r}")


#: parameter name pattern → part, per implementation (first match wins). Anything unmatched is
#: ``other``: a part one implementation has and the others lack, which the bench test refuses.
_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "posenc": ((r"^net\.pe\.", "scheme"), (r"\.attn\.", "attention"), (r"\.mlp\.", "mlp"),
               (r"(^|\.)ln(1|2|_f)\.", "norm")),
    "sdpa": ((r"\.(qkv|out)\.", "attention"), (r"\.mlp\.", "mlp"), (r"(^|\.)ln(1|2|_f)\.", "norm")),
    "xt": ((r"^net\.(rel_pos|rotary_pos_emb)\.", "scheme"), (r"\.to_(q|k|v|out)\.", "attention"),
           (r"\.ff\.", "mlp"), (r"(^net\.final_norm|^net\.layers\.\d+\.0\.\d+)\.gamma$", "norm")),
}


def param_groups(impl: str, model: nn.Module) -> dict[str, int]:
    """Parameter counts by part: ``attention``/``mlp``/``norm`` weights (matrices and norm gains)
    and their ``…-bias`` vectors apart, ``scheme`` (the encoding's own parameters), ``other``.

    Args:
        impl: ``posenc``, ``sdpa``, ``xt`` or ``xt-flash`` (which names the model's parameters).
        model: what :func:`build` returned for it.
    """
    rules = _PARTS["xt" if impl.startswith("xt") else impl]
    out = dict.fromkeys(("attention", "attention-bias", "mlp", "mlp-bias", "norm", "norm-bias",
                         "scheme", "other"), 0)
    for name, p in model.named_parameters():
        part = next((part for pattern, part in rules if re.search(pattern, name)), "other")
        if part in ("attention", "mlp", "norm") and name.endswith(".bias"):
            part += "-bias"
        out[part] += p.numel()
    return out


def forward_flops(d: int, layers: int, tokens: int, length: int, d_ff: int | None = None) -> float:
    """Matmul FLOPs of one forward: 2·(4D² + 2·D·D_ff) per token per layer, plus 4·T·D for attention."""
    d_ff = d_ff or 4 * d
    per_token = 2 * (4 * d * d + 2 * d * d_ff) + 4 * length * d
    return float(layers * tokens * per_token)


def matmul_peak(seconds: float = 2.0, n: int = 2048) -> float:
    """Measured float32 matmul throughput of this machine (FLOP/s, best of a few n×n products)."""

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


__all__ = ["SCHEMES", "build", "forward_flops", "hand_model", "matmul_peak", "param_groups"]
