"""Rotary position embedding (RoPE), its inference-time scalings, and the rotation math shared by
its variants.

Scalings (constructor option ``scaling`` of :class:`RoPE`, inherited by every variant) multiply
each pair's frequency θ_i by a factor:

* ``linear`` — position interpolation, "Extending Context Window of Large Language Models via
  Positional Interpolation" (Chen et al., 2023): θ_i / s.
* ``ntk`` — "NTK-aware scaled RoPE" (bloc97, 2023): base' = base·s^(d/(d−2)), i.e. θ_i·s^(−2i/(d−2)).
* ``dynamic_ntk`` — NTK with s recomputed per call from the span of positions (see
  :func:`dynamic_scale`); s = 1 while the span fits in ``train_len``.
* ``yarn`` — "YaRN: Efficient Context Window Extension of Large Language Models" (Peng et al., 2023):
  NTK-by-parts ramp over the pair index, as the authors' code, Hugging Face and vLLM run it
  (:func:`yarn_factors`), plus an attention temperature (:func:`yarn_attention_factor`).
* ``yarn_paper`` — the same with the ramp over each pair's rotation count, as the paper's Eq. 18 is
  written (:func:`yarn_paper_factors`); the default ``yarn`` before this distinction was drawn.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from torch import Tensor

from posenc._numerics import TWO_PI, work_dtype
from posenc.base import PosencError, PositionalEncoding, SchemeMeta, as_batched

Layout = Literal["interleaved", "half"]
Scaling = Literal["none", "linear", "ntk", "dynamic_ntk", "yarn", "yarn_paper"]
SCALINGS: tuple[str, ...] = ("none", "linear", "ntk", "dynamic_ntk", "yarn", "yarn_paper")
YARNS: tuple[str, ...] = ("yarn", "yarn_paper")


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


def ntk_factors(n_pairs: int, head_dim: int, scale: Tensor | float) -> Tensor:
    """θ'_i/θ_i = s^(−2i/(d−2)) for the NTK base; ``scale`` of shape S gives S + (n_pairs,)."""
    s = scale if isinstance(scale, Tensor) else torch.tensor(scale, dtype=torch.float64)
    i = torch.arange(n_pairs, dtype=s.dtype, device=s.device)
    return s[..., None] ** (-2.0 * i / (head_dim - 2))  # S + (n_pairs,)


def yarn_correction_range(
    head_dim: int, base: float, train_len: int, beta_fast: float, beta_slow: float, truncate: bool = True
) -> tuple[float, float]:
    """Pair indices (low, high) between which YaRN ramps, as in its authors' code (Peng et al., 2023).

    Pair i makes r_i = train_len·base^(−2i/d)/(2π) rotations over the training length; solving
    r_i = β gives i(β) = d·ln(train_len/(2πβ))/(2·ln base). low = i(β_fast), high = i(β_slow),
    floored and ceiled when ``truncate`` (the released code and Hugging Face's default), then
    clipped to [0, d − 1] as they do.
    """
    def index(rotations: float) -> float:
        return head_dim * math.log(train_len / (rotations * TWO_PI)) / (2.0 * math.log(base))

    low, high = index(beta_fast), index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def yarn_factors(
    n_pairs: int, head_dim: int, base: float, train_len: int, scale: float,
    beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True,
) -> Tensor:
    """YaRN "NTK-by-parts" factors θ'_i/θ_i as practitioners run them (Peng et al., 2023).

    The paper's Eq. 18 ramps γ over each pair's rotation count; the authors' released code, Hugging
    Face transformers and vLLM ramp it linearly over the pair *index* between
    :func:`yarn_correction_range` (low, high): γ_i = 1 − clamp((i − low)/(high − low), 0, 1) and
    θ'_i = (1 − γ_i)·θ_i/s + γ_i·θ_i. Pairs below ``low`` are left alone, pairs above ``high`` are
    interpolated like ``linear``. Returned in float64, (n_pairs,).
    """
    low, high = yarn_correction_range(head_dim, base, train_len, beta_fast, beta_slow, truncate)
    if low == high:
        high = high + 0.001  # the released code's guard against a zero-width ramp
    i = torch.arange(n_pairs, dtype=torch.float64)
    gamma = 1.0 - ((i - low) / (high - low)).clamp(0.0, 1.0)  # (n,)
    return (1.0 - gamma) / scale + gamma  # (n,)


def yarn_paper_factors(
    inv_freq: Tensor, train_len: int, scale: float, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Tensor:
    """YaRN factors as the paper's Eq. 18–19 are written (``scaling='yarn_paper'``).

    r_i = train_len·θ_i/(2π); γ_i = clamp((r_i − β_slow)/(β_fast − β_slow), 0, 1);
    θ'_i = (1 − γ_i)·θ_i/s + γ_i·θ_i. At d = 64, s = 4, train_len = 2048 this differs from
    :func:`yarn_factors` on pairs 9–20 (pair 15: ×0.33 here, ×0.60 there).
    """
    rotations = train_len * inv_freq / TWO_PI  # (n,)
    gamma = ((rotations - beta_slow) / (beta_fast - beta_slow)).clamp(0.0, 1.0)  # (n,)
    return (1.0 - gamma) / scale + gamma  # (n,)


def yarn_attention_factor(scale: float) -> float:
    """YaRN temperature as a factor on q and on k each: √(1/t) = 0.1·ln(s) + 1 (Peng et al., 2023).

    Both q and k are multiplied by it, so the logits are multiplied by (0.1·ln s + 1)² = 1/t.
    """
    return 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0


def position_bounds(q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row (min, max) over the query and key positions, each (B',) in float64 (float32 on MPS)."""
    dtype = work_dtype(q_pos.device)
    q, k = as_batched(q_pos).to(dtype), as_batched(k_pos).to(dtype)  # (Bq, T), (Bk, T)
    lo = torch.minimum(q.amin(dim=-1), k.amin(dim=-1))  # (B',)
    hi = torch.maximum(q.amax(dim=-1), k.amax(dim=-1))  # (B',)
    return lo, hi


def dynamic_scale(span: Tensor, train_len: int, scale: float = 1.0) -> Tensor:
    """Dynamic-NTK factor per row: max(1, a·L/train_len − (a − 1)) for spans L (B',), a = ``scale``.

    With a = 1 this is s = max(1, L/train_len); a > 1 is the Hugging Face generalisation.
    """
    return (scale * span / train_len - (scale - 1.0)).clamp(min=1.0)  # (B',)


def check_scaling(
    scaling: str, scale_factor: float, train_len: int | None, beta_fast: float, beta_slow: float,
    head_dim: int,
) -> None:
    """Raise :class:`PosencError` for an inconsistent set of RoPE scaling options."""
    if scaling not in SCALINGS:
        raise PosencError(f"RoPE scaling must be one of {SCALINGS}, got {scaling!r}")
    if not scale_factor >= 1.0:
        raise PosencError(f"RoPE scale_factor must be >= 1, got {scale_factor}")
    if scaling == "none" and scale_factor != 1.0:
        raise PosencError(f"RoPE scale_factor={scale_factor} has no effect with scaling='none'")
    if scaling in ("dynamic_ntk", *YARNS) and (train_len is None or train_len < 1):
        raise PosencError(f"RoPE scaling={scaling!r} needs a positive train_len, got {train_len}")
    if scaling in YARNS and not beta_fast > beta_slow >= (0 if scaling == "yarn_paper" else 1e-300):
        raise PosencError(f"{scaling} needs beta_fast > beta_slow > 0, got {beta_fast} and {beta_slow}")
    if scaling in ("ntk", "dynamic_ntk") and head_dim <= 2:
        raise PosencError(f"NTK scaling needs head_dim > 2, got {head_dim}")


# --------------------------------------------------------------------------------- scheme
class RoPE(PositionalEncoding):
    """Rotary position embedding, "RoFormer: Enhanced Transformer with Rotary Position
    Embedding" (Su et al., 2021).

    Queries and keys are rotated pairwise by angles pos·θ_i so that q_m·k_n depends on m − n only.
    With ``scaling='none'`` (the default) nothing else happens; the other scalings are described
    in the module docstring. ``dynamic_ntk`` takes the span L = max − min + 1 of the query and key
    positions of each batch row (= max position + 1 for positions starting at 0, as in the Hugging
    Face implementation; a span rather than the raw maximum keeps shifted windows such as genome
    coordinates shift-invariant). Pairs listed by :meth:`pinned` are never scaled.

    Args:
        base: frequency base (10000 in the paper).
        layout: ``interleaved`` (paper) or ``half`` (GPT-NeoX style).
        scaling: ``none``, ``linear``, ``ntk``, ``dynamic_ntk``, ``yarn`` or ``yarn_paper``.
        scale_factor: s ≥ 1 (must stay 1 with ``none``; the HF "factor" a for ``dynamic_ntk``).
        train_len: training context length (needed by ``dynamic_ntk`` and ``yarn``).
        beta_fast: YaRN β (rotations per training length above which a pair is left alone).
        beta_slow: YaRN α (rotations below which a pair is fully interpolated).
        truncate: ``yarn`` only: floor/ceil the correction range to whole pairs (Hugging Face's
            ``truncate``, default True as there).
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
        scaling: Scaling = "none",
        scale_factor: float = 1.0,
        train_len: int | None = None,
        beta_fast: float = 32.0,
        beta_slow: float = 1.0,
        truncate: bool = True,
    ) -> None:
        super().__init__(d_model, n_heads)
        name = type(self).__name__
        if self.head_dim % 2:
            raise PosencError(
                f"{name} needs an even head dimension, got head_dim={self.head_dim} "
                f"(d_model={d_model} / n_heads={n_heads})"
            )
        if layout not in ("interleaved", "half"):
            raise PosencError(f"{name} layout must be 'interleaved' or 'half', got {layout!r}")
        if base <= 1:
            raise PosencError(f"{name} base must be > 1, got {base}")
        check_scaling(scaling, scale_factor, train_len, beta_fast, beta_slow, self.head_dim)
        self.base, self.layout = base, layout
        self.scaling, self.scale_factor, self.train_len = scaling, float(scale_factor), train_len
        self.beta_fast, self.beta_slow, self.truncate = beta_fast, beta_slow, bool(truncate)
        self._cache: dict[str, Tensor] = {}  # device → frequencies in the working dtype

    # ------------------------------------------------------------------- frequencies
    def frequencies(self) -> Tensor:
        """Unscaled per-pair angular frequencies (Dh/2,) in float64; variants override this."""
        return rope_inv_freq(self.head_dim, self.base)

    def pinned(self) -> Tensor:
        """Bool mask (Dh/2,) of pairs that inference-time scaling leaves alone (none for RoPE)."""
        return torch.zeros(self.head_dim // 2, dtype=torch.bool)

    @property
    def inv_freq(self) -> Tensor:
        """The scaled frequencies in float32 (dynamic NTK: as at spans ≤ ``train_len``)."""
        return self.scaled_frequencies().float()

    def scaled_frequencies(self, span: Tensor | None = None) -> Tensor:
        """Frequencies after scaling, float64: (Dh/2,), or (B', Dh/2) for dynamic NTK given spans (B',)."""
        return self._apply_scaling(self.frequencies(), span)

    def _apply_scaling(self, freqs: Tensor, span: Tensor | None) -> Tensor:
        """Multiply ``freqs`` (Dh/2,) by this scheme's scaling factors (pinned pairs excepted)."""
        s, n = self.scale_factor, freqs.shape[-1]
        if self.scaling == "none" or (self.scaling == "dynamic_ntk" and span is None):
            return freqs
        like = {"dtype": freqs.dtype, "device": freqs.device}
        if self.scaling == "linear":
            factor = torch.full((n,), 1.0 / s, **like)
        elif self.scaling == "ntk":
            factor = ntk_factors(n, self.head_dim, torch.tensor(s, **like))  # (n,)
        elif self.scaling == "yarn":
            factor = yarn_factors(
                n, self.head_dim, self.base, self.train_len, s, self.beta_fast, self.beta_slow, self.truncate
            ).to(**like)  # (n,)
        elif self.scaling == "yarn_paper":
            factor = yarn_paper_factors(freqs.detach(), self.train_len, s, self.beta_fast, self.beta_slow)
        else:
            rows = dynamic_scale(span.to(**like), self.train_len, s)  # (B',)
            factor = ntk_factors(n, self.head_dim, rows)  # (B', n)
        keep = self.pinned().to(freqs.device)  # (n,)
        return freqs * torch.where(keep, torch.ones((), **like), factor)  # (n,) or (B', n)

    def _device_frequencies(self, device: torch.device) -> Tensor:
        """Frequencies on ``device`` in the working dtype, static scaling applied; cached unless learned."""
        key = str(device)
        if self.learned_frequencies or key not in self._cache:
            freqs = self.frequencies().to(device=device, dtype=work_dtype(device))
            if self.scaling != "dynamic_ntk":
                freqs = self._apply_scaling(freqs, None)
            if self.learned_frequencies:
                return freqs
            self._cache[key] = freqs
        return self._cache[key]

    # ------------------------------------------------------------------- hooks
    def angles(self, pos: Tensor, span: Tensor | None = None) -> Tensor:
        """Rotation angles for ``pos`` as (B', 1, T, Dh/2) in float32 (float64 for float64 ``pos``).

        ``span`` (B',) sets the dynamic-NTK scale; by default the span of ``pos`` itself.
        """
        freqs = self._device_frequencies(pos.device)
        if self.scaling == "dynamic_ntk":
            if span is None:
                lo, hi = position_bounds(pos, pos)
                span = hi - lo + 1.0  # (B',)
            freqs = self._apply_scaling(freqs, span)  # (B', Dh/2)
        return rope_angles(pos, freqs)

    def _tables(self, pos: Tensor, span: Tensor | None) -> tuple[Tensor, Tensor]:
        """:func:`rotation_tables` for ``pos``, kept for the next call with equal positions (every
        layer of a forward, and queries and keys), unless they could be stale: dynamic NTK (its
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
        """Factor applied to q and to k after rotation (YaRN temperature; 1 otherwise)."""
        return yarn_attention_factor(self.scale_factor) if self.scaling in YARNS else 1.0

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        span = None
        if self.scaling == "dynamic_ntk":  # one scale for q and k, or q·k would not be relative
            lo, hi = position_bounds(q_pos, k_pos)
            span = hi - lo + 1.0  # (B',)
        q = rotate_with_tables(q, *self._tables(q_pos, span), self.layout)  # (B, H, T, Dh)
        k = rotate_with_tables(k, *self._tables(k_pos, span), self.layout)  # (B, H, T, Dh)
        m = self.attention_factor()
        return (q * m, k * m) if m != 1.0 else (q, k)
