"""Rotary position embedding (RoPE) and the rotation math shared by its variants.

Inference-time scalings (linear, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE) and partial rotation are
one value, :class:`~posenc.rope_scaling.RopeScaling`, given to every rotary scheme as ``scaling=``;
its types are the registry :data:`~posenc.rope_scaling.SCALINGS`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from torch import Tensor

from posenc._numerics import TWO_PI, work_dtype
from posenc.base import PosencError, PositionalEncoding, SchemeMeta, as_batched
from posenc.rope_scaling import Ladder, RopeScaling, as_scaling

Layout = Literal["interleaved", "half"]


# --------------------------------------------------------------------------------- pure math
def rope_inv_freq(head_dim: int, base: float = 10000.0) -> Tensor:
    """Su et al. (2021) frequencies θ_i = base^(-2i/d), i = 0..d/2-1, in float64."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return base ** (-2.0 * i / head_dim)  # (d/2,)


def rope_angles(pos: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles pos·θ_i as (B', 1, T, d/2): float32, or float64 (unreduced) if ``pos`` is float64.

    ``inv_freq`` is (d/2,) or per row (B', d/2). The product is formed in float64 and reduced
    modulo 2π before the cast to float32, so the angles stay exact to float32 rounding (~5e-7 rad)
    even at positions ~10^6 (a float32 product would be off by ~0.03 rad there). Autocast is
    disabled so bf16 runs rotate by these exact angles too.
    """
    dtype = torch.float64 if pos.dtype == torch.float64 else torch.float32
    work = work_dtype(pos.device)
    with torch.autocast(device_type=pos.device.type, enabled=False):
        p = as_batched(pos).to(work)  # (B', T)
        f = inv_freq.to(device=pos.device, dtype=work)
        f = f[:, None, None, :] if f.dim() == 2 else f  # (B', 1, 1, d/2) or (d/2,)
        angles = p[:, None, :, None] * f  # (B', 1, T, d/2)
        if dtype != torch.float64:
            angles = torch.remainder(angles, TWO_PI)
        return angles.to(dtype)


def apply_rotation(x: Tensor, angles: Tensor, layout: Layout = "interleaved") -> Tensor:
    """Rotate each 2-D pair of ``x`` (B, H, T, Dh) by ``angles`` (B', 1, T, Dh/2).

    ``interleaved`` pairs (x0, x1), (x2, x3), … as in the paper; ``half`` pairs (x_i, x_{i+Dh/2})
    as in GPT-NeoX / Llama. The product is computed in the angles' dtype and cast back.
    """
    return rotate_with_tables(x, *rotation_tables(angles, layout), layout)


def rotation_tables(angles: Tensor, layout: Layout) -> tuple[Tensor, Tensor]:
    """cos and signed sin of ``angles`` (…, Dh/2) spread over the Dh features of ``layout``.

    With these, a pair (a, b) rotates as (a, b)·cos + (b, a)·(−sin, +sin): two multiplies and an
    add per feature (:func:`rotate_with_tables`), and the tables can be reused by every layer.
    """
    cos, sin = angles.cos(), angles.sin()  # (…, Dh/2)
    if layout == "interleaved":
        return cos.repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)  # (…, Dh)
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)  # (…, Dh)


def swap_pairs(x: Tensor, layout: Layout) -> Tensor:
    """Exchange the two members of every rotation pair of ``x`` (…, Dh)."""
    if layout == "interleaved":
        return torch.stack((x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # (…, Dh/2, 2) → (…, Dh)
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], x[..., :half]), dim=-1)  # (…, Dh)


def rotate_with_tables(x: Tensor, cos: Tensor, sin: Tensor, layout: Layout) -> Tensor:
    """``x``·cos + swap(``x``)·sin with :func:`rotation_tables`; computed in their dtype, cast back.

    Interleaved pairs are rotated as one complex product (a + ib)·(cos + i·sin) on the pairs viewed
    as complex numbers: one pass over ``x`` instead of a strided swap, a multiply and an add (the
    same numbers to float rounding, ~15× faster on CPU for (32, 8, 128, 16)).
    """
    xf = x.to(cos.dtype)
    if layout == "interleaved" and x.device.type != "mps":
        if xf.stride(-1) != 1 or xf.storage_offset() % 2 or any(st % 2 for st in xf.stride()[:-1]):
            xf = xf.contiguous()  # view_as_complex needs (real, imag) adjacent at even offsets
        cis = torch.complex(cos[..., 0::2], sin[..., 1::2])  # (…, Dh/2): cos θ + i sin θ
        turned = torch.view_as_complex(xf.unflatten(-1, (-1, 2))) * cis  # (B, H, T, Dh/2) complex
        return torch.view_as_real(turned).flatten(-2).to(x.dtype)  # (B, H, T, Dh)
    return torch.addcmul(xf * cos, swap_pairs(xf, layout), sin).to(x.dtype)  # (B, H, T, Dh)


def pair_to_features(values: Tensor, layout: Layout) -> Tensor:
    """Spread a per-pair tensor (…, Dh/2) over the Dh features of ``layout`` (…, Dh)."""
    if layout == "interleaved":
        return values.repeat_interleave(2, dim=-1)  # (…, Dh): v0 v0 v1 v1 …
    return torch.cat((values, values), dim=-1)  # (…, Dh): v0 v1 … v0 v1 …


def position_bounds(q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row (min, max) over the query and key positions, each (B',) in float64 (float32 on MPS)."""
    dtype = work_dtype(q_pos.device)
    q, k = as_batched(q_pos).to(dtype), as_batched(k_pos).to(dtype)  # (Bq, T), (Bk, T)
    lo = torch.minimum(q.amin(dim=-1), k.amin(dim=-1))  # (B',)
    hi = torch.maximum(q.amax(dim=-1), k.amax(dim=-1))  # (B',)
    return lo, hi


# --------------------------------------------------------------------------------- scheme
class RoPE(PositionalEncoding):
    """Rotary position embedding, "RoFormer: Enhanced Transformer with Rotary Position
    Embedding" (Su et al., 2021).

    Queries and keys are rotated pairwise by angles pos·θ_i so that q_m·k_n depends on m − n only.
    Without ``scaling`` nothing else happens; a :class:`~posenc.rope_scaling.RopeScaling` scales the
    frequencies (its type's function of :data:`~posenc.rope_scaling.SCALINGS`), multiplies q and k
    by its attention factor, and may rotate only part of each head (``partial_rotary_factor``: the
    first features rotate, the rest pass through, the factor on the rotated ones only, as in Hugging
    Face). A dynamic type (``dynamic_ntk``, ``longrope``) reads the span L = max − min + 1 of the
    query and key positions of each batch row (= max position + 1 for positions starting at 0, as
    Hugging Face reads it; a span rather than the raw maximum keeps shifted windows such as genome
    coordinates shift-invariant). Pairs listed by :meth:`pinned` are never scaled.

    Args:
        base: frequency base (10000 in the paper).
        layout: ``interleaved`` (paper) or ``half`` (GPT-NeoX style).
        scaling: the inference-time scaling and partial rotation, a
            :class:`~posenc.rope_scaling.RopeScaling` or a mapping of its fields (a config's
            ``scaling: {type: yarn, factor: 8, train_len: 128}``); ``None``: plain RoPE.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("rotate",))
    learned_frequencies: bool = False  # variants with learnable θ set this (no caching then)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        base: float = 10000.0,
        layout: Layout = "interleaved",
        scaling: RopeScaling | None = None,
    ) -> None:
        super().__init__(d_model, n_heads)
        name = type(self).__name__
        if layout not in ("interleaved", "half"):
            raise PosencError(f"{name} layout must be 'interleaved' or 'half', got {layout!r}")
        if base <= 1:
            raise PosencError(f"{name} base must be > 1, got {base}")
        self.base, self.layout = base, layout
        self.scaling = as_scaling(scaling)
        self.rotary_dim = self.scaling.rotary_dim(self.head_dim)  # features rotated per head
        self.n_pairs = self.rotary_dim // 2
        self._rule = self.scaling.rule
        # the attention factor depends on the value alone; computing it here also runs the type's
        # function once, so a value that cannot fit these heads (longrope's lists) is refused now
        plain = self._ladder(rope_inv_freq(self.rotary_dim, base))
        _, self._attention = self._rule.fn(self.scaling, plain, None)
        self._cache: dict[str, Tensor] = {}  # device → frequencies in the working dtype

    # ------------------------------------------------------------------- frequencies
    def frequencies(self) -> Tensor:
        """Unscaled per-pair angular frequencies (n_pairs,) in float64; variants override this."""
        return rope_inv_freq(self.rotary_dim, self.base)

    def pinned(self) -> Tensor:
        """Bool mask (n_pairs,) of pairs that inference-time scaling leaves alone (none for RoPE)."""
        return torch.zeros(self.n_pairs, dtype=torch.bool)

    @property
    def inv_freq(self) -> Tensor:
        """The scaled frequencies in float32 (a dynamic type: as at spans ≤ ``train_len``)."""
        return self.scaled_frequencies().float()

    def scaled_frequencies(self, span: Tensor | None = None) -> Tensor:
        """Frequencies after scaling, float64: (n_pairs,), or (B', n_pairs) for a dynamic type given
        spans (B',)."""
        return self._apply_scaling(self.frequencies(), span)

    def _ladder(self, freqs: Tensor) -> Ladder:
        return Ladder(freqs, self.rotary_dim, self.base)

    def _apply_scaling(self, freqs: Tensor, span: Tensor | None) -> Tensor:
        """``freqs`` (n,) scaled by this scheme's scaling type (pinned pairs excepted)."""
        if self.scaling.type == "none":
            return freqs
        scaled, _ = self._rule.fn(self.scaling, self._ladder(freqs), span)  # (n,) or (B', n)
        return torch.where(self.pinned().to(freqs.device), freqs, scaled)  # (n,) or (B', n)

    def _device_frequencies(self, device: torch.device) -> Tensor:
        """Frequencies on ``device`` in the working dtype, static scaling applied; cached unless learned."""
        key = str(device)
        if self.learned_frequencies or key not in self._cache:
            freqs = self.frequencies().to(device=device, dtype=work_dtype(device))
            if not self._rule.dynamic:
                freqs = self._apply_scaling(freqs, None)
            if self.learned_frequencies:
                return freqs
            self._cache[key] = freqs
        return self._cache[key]

    # ------------------------------------------------------------------- hooks
    def angles(self, pos: Tensor, span: Tensor | None = None) -> Tensor:
        """Rotation angles for ``pos`` as (B', 1, T, n_pairs) in float32 (float64 for float64 ``pos``).

        ``span`` (B',) sets a dynamic type's scale; by default the span of ``pos`` itself.
        """
        freqs = self._device_frequencies(pos.device)
        if self._rule.dynamic:
            if span is None:
                lo, hi = position_bounds(pos, pos)
                span = hi - lo + 1.0  # (B',)
            freqs = self._apply_scaling(freqs, span)  # (B', n_pairs)
        return rope_angles(pos, freqs)

    def _tables(self, pos: Tensor, span: Tensor | None) -> tuple[Tensor, Tensor]:
        """:func:`rotation_tables` for ``pos``, kept for the next call with equal positions (every
        layer of a forward, and queries and keys), unless they could be stale: a dynamic type (its
        scale depends on both position sets), or learnable frequencies with autograd on (the tables
        would carry one forward's graph into the next). Parameter versions are part of the key."""
        if span is not None or (self.learned_frequencies and torch.is_grad_enabled()):
            return rotation_tables(self.angles(pos, span), self.layout)
        versions = tuple(p._version for p in self.parameters())
        key = (tuple(pos.shape), pos.dtype, str(pos.device), self.layout, versions)
        held = self.__dict__.get("_held_tables")
        if held is None or held[0] != key or not torch.equal(held[1], pos):
            held = (key, pos.clone(), rotation_tables(self.angles(pos), self.layout))
            self.__dict__["_held_tables"] = held
        return held[2]

    def attention_factor(self) -> float:
        """Factor applied to the rotated part of q and of k (YaRN's temperature, LongRoPE's; else 1)."""
        return self._attention

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        span = None
        if self._rule.dynamic:  # one scale for q and k, or q·k would not be relative
            lo, hi = position_bounds(q_pos, k_pos)
            span = hi - lo + 1.0  # (B',)
        return self._turn(q, q_pos, span), self._turn(k, k_pos, span)

    def _turn(self, x: Tensor, pos: Tensor, span: Tensor | None) -> Tensor:
        """``x`` (B, H, T, Dh) with its first ``rotary_dim`` features rotated (times the attention
        factor) and the others as they are."""
        r, m = self.rotary_dim, self._attention
        turned = rotate_with_tables(x[..., :r], *self._tables(pos, span), self.layout)  # (B, H, T, r)
        if m != 1.0:
            turned = turned * m
        return turned if r == x.shape[-1] else torch.cat((turned, x[..., r:]), dim=-1)  # (B, H, T, Dh)
