"""Parametric distance kernels as logit biases: a Gaussian locality prior and KERPLE.

Both are functions of |i − j| with a few learnable scalars per head (kept in range by softplus /
sigmoid), so they are defined at any distance and extrapolate to any length.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.base import PosencError
from posenc.bias import BiasEncoding
from posenc.learned_bias import inverse_softplus

KerpleVariant = Literal["log", "power"]


# --------------------------------------------------------------------------- pure math
def gaussian_prior_bias(dist: Tensor, mu: Tensor, sigma: Tensor) -> Tensor:
    """−(|d| − μ_h)² / (2σ_h²) for distances (B', 1, Tq, Tk) and per-head μ, σ (H,) → (B', H, Tq, Tk)."""
    mu, sigma = mu.view(1, -1, 1, 1), sigma.view(1, -1, 1, 1)  # (1, H, 1, 1)
    return -((dist.abs() - mu) ** 2) / (2.0 * sigma**2)


def kerple_log_bias(dist: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    """KERPLE logarithmic kernel −r1_h·log(1 + r2_h·|d|): (B', 1, Tq, Tk) → (B', H, Tq, Tk)."""
    return -r1.view(1, -1, 1, 1) * torch.log1p(r2.view(1, -1, 1, 1) * dist.abs())  # (1, H, 1, 1) per head


def kerple_power_bias(dist: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    """KERPLE power kernel −r1_h·|d|^r2_h: (B', 1, Tq, Tk) → (B', H, Tq, Tk)."""
    return -r1.view(1, -1, 1, 1) * dist.abs().pow(r2.view(1, -1, 1, 1))  # (1, H, 1, 1) per head


def geometric_spread(lo: float, hi: float, n: int) -> list[float]:
    """n values from ``lo`` to ``hi`` in geometric progression (``lo`` alone when n = 1)."""
    if n == 1:
        return [float(lo)]
    return [lo * (hi / lo) ** (h / (n - 1)) for h in range(n)]


def per_head(value: float | list[float], n_heads: int, name: str) -> Tensor:
    """A float broadcast to, or a list checked against, H heads, as a float32 (H,) tensor."""
    values = [float(value)] * n_heads if isinstance(value, (int, float)) else [float(v) for v in value]
    if len(values) != n_heads:
        raise PosencError(f"{name} needs one value per head ({n_heads}), got {len(values)}: {value!r}")
    return torch.tensor(values, dtype=torch.float32)  # (H,)


def _check_positive(t: Tensor, name: str, value: object) -> None:
    if not bool((t > 0).all()) or not bool(torch.isfinite(t).all()):
        raise PosencError(f"{name} must be finite and > 0, got {value!r}")


# --------------------------------------------------------------------------- schemes
class GaussianPrior(BiasEncoding):
    """Per-head Gaussian locality prior on the logits, −(|i − j| − μ_h)² / (2σ_h²).

    A Gaussian prior over relative positions as in "Modeling Localness for Self-Attention Networks"
    (Yang, Tu, Wong, Meng, Chao and Zhang, 2018), here with a learned width per head and a
    centre fixed at 0 by default. σ_h = softplus(ρ_h) is learnable; by default it starts geometric
    from ``sigma_min`` to ``sigma_max`` positions over the heads. μ_h is a fixed buffer unless
    ``learn_mu`` (then μ_h = softplus(·), so it must start > 0). The bias is ≤ 0 and peaks (at 0)
    where |i − j| = μ_h; it is symmetric (no causal/asymmetric variant).

    Args:
        sigmas: initial widths, one per head (overrides ``sigma_min``/``sigma_max``).
        sigma_min, sigma_max: range of the default geometric initialisation.
        mu: centre(s) μ_h ≥ 0, a float for every head or one per head.
        learn_mu: learn μ_h too.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        sigmas: list[float] | None = None,
        sigma_min: float = 2.0,
        sigma_max: float = 64.0,
        mu: float | list[float] = 0.0,
        learn_mu: bool = False,
    ) -> None:
        super().__init__(d_model, n_heads)
        if sigmas is None:
            if not 0 < sigma_min <= sigma_max or math.isinf(sigma_max):
                raise PosencError(
                    f"GaussianPrior needs 0 < sigma_min <= sigma_max < inf, got {sigma_min}, {sigma_max}"
                )
            sigmas = geometric_spread(sigma_min, sigma_max, n_heads)
        sigma0 = per_head(sigmas, n_heads, "GaussianPrior sigmas")
        _check_positive(sigma0, "GaussianPrior sigmas", sigmas)
        mu0 = per_head(mu, n_heads, "GaussianPrior mu")
        if learn_mu:
            _check_positive(mu0, "GaussianPrior mu (learnable through softplus)", mu)
            self.raw_mu = nn.Parameter(inverse_softplus(mu0))
        else:
            if not bool((mu0 >= 0).all()):
                raise PosencError(f"GaussianPrior mu must be >= 0, got {mu!r}")
            self.register_buffer("fixed_mu", mu0)
        self.learn_mu = learn_mu
        self.raw_sigma = nn.Parameter(inverse_softplus(sigma0))  # (H,)

    @property
    def sigma(self) -> Tensor:
        """Current widths σ_h (H,)."""
        return F.softplus(self.raw_sigma)

    @property
    def mu(self) -> Tensor:
        """Current centres μ_h (H,)."""
        return F.softplus(self.raw_mu) if self.learn_mu else self.fixed_mu

    def distance_bias(self, dist: Tensor) -> Tensor:
        return gaussian_prior_bias(dist, self.mu, self.sigma)  # (B', H, Tq, Tk)


class Kerple(BiasEncoding):
    """Kernelized relative positional embedding, "KERPLE: Kernelized Relative Positional Embedding
    for Length Extrapolation" (Chi, Fan, Ramadge and Rudnicky, 2022).

    Per-head conditionally positive definite kernels of the distance, as logit biases:

    * ``log``: −r1_h·log(1 + r2_h·|i − j|), r1 = softplus(·) > 0, r2 = softplus(·) > 0;
    * ``power``: −r1_h·|i − j|^r2_h, r1 = softplus(·) > 0, r2 = 2·sigmoid(·) ∈ (0, 2).

    The reference code keeps r1, r2 in range by clamping the raw parameters; softplus / sigmoid keep them
    in range smoothly (the power exponent never reaches exactly 2). Both biases are ≤ 0 and
    non-increasing in |i − j|.

    Args:
        variant: ``log`` (the paper's best) or ``power``.
        r1_init: initial r1 (float or one per head).
        r2_init: initial r2 (float or one per head; in (0, 2) for ``power``).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        variant: KerpleVariant = "log",
        r1_init: float | list[float] = 1.0,
        r2_init: float | list[float] = 1.0,
    ) -> None:
        super().__init__(d_model, n_heads)
        if variant not in ("log", "power"):
            raise PosencError(f"Kerple variant must be 'log' or 'power', got {variant!r}")
        r1, r2 = per_head(r1_init, n_heads, "Kerple r1_init"), per_head(r2_init, n_heads, "Kerple r2_init")
        _check_positive(r1, "Kerple r1_init", r1_init)
        _check_positive(r2, "Kerple r2_init", r2_init)
        self.variant = variant
        self.raw_r1 = nn.Parameter(inverse_softplus(r1))  # (H,)
        if variant == "power":
            if not bool((r2 < 2).all()):
                raise PosencError(f"Kerple power r2_init must be in (0, 2), got {r2_init!r}")
            self.raw_r2 = nn.Parameter(torch.logit(r2 / 2))  # (H,)
        else:
            self.raw_r2 = nn.Parameter(inverse_softplus(r2))  # (H,)

    @property
    def r1(self) -> Tensor:
        return F.softplus(self.raw_r1)

    @property
    def r2(self) -> Tensor:
        return 2 * torch.sigmoid(self.raw_r2) if self.variant == "power" else F.softplus(self.raw_r2)

    def distance_bias(self, dist: Tensor) -> Tensor:
        kernel = kerple_power_bias if self.variant == "power" else kerple_log_bias
        return kernel(dist, self.r1, self.r2)  # (B', H, Tq, Tk)
