"""The pure math of RoPE's inference-time scalings: per-pair frequency factors θ'_i/θ_i and attention
factors, in float64, each written from its paper or the code its authors released. The value that
selects among them and the registry that applies them: :mod:`posenc.rope_scaling`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._numerics import TWO_PI


def ntk_factors(n_pairs: int, dim: int, scale: Tensor | float) -> Tensor:
    """θ'_i/θ_i = s^(−2i/(d−2)) for the NTK base; ``scale`` of shape S gives S + (n_pairs,)."""
    s = scale if isinstance(scale, Tensor) else torch.tensor(scale, dtype=torch.float64)
    i = torch.arange(n_pairs, dtype=s.dtype, device=s.device)
    return s[..., None] ** (-2.0 * i / (dim - 2))  # S + (n_pairs,)


def dynamic_scale(span: Tensor, train_len: int, scale: float = 1.0) -> Tensor:
    """Dynamic-NTK factor per row: max(1, a·L/train_len − (a − 1)) for spans L (B',), a = ``scale``.

    With a = 1 this is s = max(1, L/train_len); a > 1 is the Hugging Face generalisation.
    """
    return (scale * span / train_len - (scale - 1.0)).clamp(min=1.0)  # (B',)


def yarn_correction_range(
    dim: int, base: float, train_len: int, beta_fast: float, beta_slow: float, truncate: bool = True
) -> tuple[float, float]:
    """Pair indices (low, high) between which YaRN ramps, as in its authors' code (Peng et al., 2023).

    Pair i makes r_i = train_len·base^(−2i/d)/(2π) rotations over the training length; solving
    r_i = β gives i(β) = d·ln(train_len/(2πβ))/(2·ln base). low = i(β_fast), high = i(β_slow),
    floored and ceiled when ``truncate`` (the released code and Hugging Face's default), then
    clipped to [0, d − 1] as they do.
    """
    def index(rotations: float) -> float:
        return dim * math.log(train_len / (rotations * TWO_PI)) / (2.0 * math.log(base))

    low, high = index(beta_fast), index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_factors(
    n_pairs: int, dim: int, base: float, train_len: int, scale: float,
    beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True,
) -> Tensor:
    """YaRN "NTK-by-parts" factors θ'_i/θ_i as practitioners run them (Peng et al., 2023).

    The ramp is linear in the pair *index* between :func:`yarn_correction_range` (low, high):
    γ_i = 1 − clamp((i − low)/(high − low), 0, 1) and θ'_i = (1 − γ_i)·θ_i/s + γ_i·θ_i. Pairs below
    ``low`` are left alone, pairs above ``high`` are interpolated like ``linear``; β_fast = β_slow
    (Kimi K2's setting) gives a ramp one pair wide. Returned in float64, (n_pairs,).
    """
    low, high = yarn_correction_range(dim, base, train_len, beta_fast, beta_slow, truncate)
    if low == high:
        high = high + 0.001  # the released code's guard against a zero-width ramp
    i = torch.arange(n_pairs, dtype=torch.float64)
    gamma = 1.0 - ((i - low) / (high - low)).clamp(0.0, 1.0)  # (n,)
    return (1.0 - gamma) / scale + gamma  # (n,)


def yarn_paper_factors(
    freqs: Tensor, train_len: int, scale: float, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> Tensor:
    """YaRN factors as the paper's Eq. 18–19 are written (type ``yarn_paper``).

    r_i = train_len·θ_i/(2π); γ_i = clamp((r_i − β_slow)/(β_fast − β_slow), 0, 1);
    θ'_i = (1 − γ_i)·θ_i/s + γ_i·θ_i. At d = 64, s = 4, train_len = 2048 this differs from
    :func:`yarn_factors` on pairs 9–20 (pair 15: ×0.33 here, ×0.60 there).
    """
    rotations = train_len * freqs / TWO_PI  # (n,)
    gamma = ((rotations - beta_slow) / (beta_fast - beta_slow)).clamp(0.0, 1.0)  # (n,)
    return (1.0 - gamma) / scale + gamma  # (n,)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """0.1·m·ln s + 1 for s > 1, else 1: YaRN's √(1/t) (Peng et al., 2023), m = 1 in the paper."""
    return 0.1 * mscale * math.log(scale) + 1.0 if scale > 1.0 else 1.0


def llama3_factors(freqs: Tensor, train_len: int, scale: float, low: float, high: float) -> Tensor:
    """θ'_i/θ_i of Llama 3.1 ("The Llama 3 Herd of Models", Meta, 2024; its released rope scaling).

    With wavelength λ_i = 2π/θ_i and σ_i = clamp((train_len/λ_i − low)/(high − low), 0, 1):
    θ'_i = (1 − σ_i)·θ_i/s + σ_i·θ_i. Bands longer than train_len/low are divided by s, bands shorter
    than train_len/high are kept, and the ones between are mixed.
    """
    sigma = ((train_len * freqs / TWO_PI - low) / (high - low)).clamp(0.0, 1.0)  # (n,)
    return (1.0 - sigma) / scale + sigma  # (n,)


