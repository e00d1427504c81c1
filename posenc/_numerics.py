"""Precision helpers shared by the catalogue: position math in float64, results in float32."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posenc.base import PosencError

TWO_PI = 2.0 * math.pi


def work_dtype(device: torch.device) -> torch.dtype:
    """float64 for position × frequency products, except on devices without it (Apple MPS)."""
    return torch.float32 if device.type == "mps" else torch.float64


def out_dtype(pos: Tensor) -> torch.dtype:
    """float64 when positions are float64 (exact references in tests), else float32."""
    return torch.float64 if pos.dtype == torch.float64 else torch.float32


def pad_features(t: Tensor, dim: int) -> Tensor:
    """Zero-pad the last dimension of ``t`` to ``dim`` features (S + (k,) → S + (dim,))."""
    extra = dim - t.shape[-1]
    if extra <= 0:
        return t
    return torch.cat((t, t.new_zeros(*t.shape[:-1], extra)), dim=-1)  # S + (dim,)


def require_integers(pos: Tensor, who: str) -> None:
    """Raise :class:`~posenc.base.PosencError` if ``pos`` holds non-integer values."""

    if pos.is_floating_point() and not torch.equal(pos, pos.round()):
        raise PosencError(f"{who} needs integer positions, got fractional values")


def log_offset(freqs: Tensor, learnable: bool) -> nn.Parameter:
    """A float32 log-frequency offset δ (zeros like ``freqs``) for learnable frequencies ω₀·e^δ.

    The configured ω₀ stay an exact float64 tensor outside the parameters (so ``.half()`` or a
    float32 log cannot round them: a relative error of 1e-7 is 0.1 rad at position 10^6); only the
    learned change δ is a parameter.
    """
    return nn.Parameter(torch.zeros(freqs.shape[-1]), requires_grad=bool(learnable))


def offset_frequencies(freqs0: Tensor, offset: Tensor) -> Tensor:
    """ω = ω₀·e^δ in float64 on the offset's device: exactly ω₀ while δ = 0."""
    return freqs0.to(offset.device) * offset.double().exp()
