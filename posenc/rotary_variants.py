"""RoPE variants: frequencies pinned to known periods (PeriodicRoPE) and exponential decay (XPos).

Both take RoPE's options (``base``, ``layout`` and the one ``scaling`` value: inference-time scaling
and partial rotation) and pass them to :class:`~posenc.rotary.RoPE` unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor

from posenc._numerics import TWO_PI, log_offset, offset_frequencies, work_dtype
from posenc.base import PosencError, SchemeMeta, as_batched
from posenc.rope_scaling import RopeScaling
from posenc.rotary import Layout, RoPE, pair_to_features, position_bounds, rope_inv_freq

# ------------------------------------------------------------------------------ PeriodicRoPE math


def check_periods(periods: Sequence[float], n_pairs: int) -> list[float]:
    """The periods as floats, or :class:`PosencError` naming the offending value."""
    if isinstance(periods, (str, bytes)) or not isinstance(periods, Sequence) or not periods:
        raise PosencError(f"PeriodicRoPE periods must be a non-empty list of numbers, got {periods!r}")
    out = [float(p) for p in periods]
    for p in out:
        if not math.isfinite(p) or p < 2.0:
            raise PosencError(f"PeriodicRoPE period {p} must be finite and >= 2 positions (Nyquist)")
    if len(set(out)) != len(out):
        raise PosencError(f"PeriodicRoPE periods must be distinct, got {out}")
    if len(out) > n_pairs:
        raise PosencError(f"PeriodicRoPE got {len(out)} periods for only {n_pairs} rotation pairs")
    return out


def pin_pairs(ladder: Tensor, omegas: Sequence[float]) -> list[int]:
    """Pair index for each pinned angular frequency.

    In the given order, each frequency takes the not-yet-pinned pair whose ladder frequency is
    closest to it in log-frequency (ties go to the lower index), so pinning disturbs the ladder's
    coverage of scales as little as possible.
    """
    logs = [math.log(f) for f in ladder.tolist()]
    free, out = list(range(len(logs))), []
    for w in omegas:
        best = min(free, key=lambda i: (abs(logs[i] - math.log(w)), i))
        free.remove(best)
        out.append(best)
    return out


def periodic_frequencies(head_dim: int, base: float, periods: Sequence[float]) -> tuple[Tensor, list[int]]:
    """RoPE ladder with pinned pairs set to 2π/period: float64 (Dh/2,) and the pinned indices."""
    ladder = rope_inv_freq(head_dim, base)  # (Dh/2,)
    omegas = [TWO_PI / p for p in periods]
    index = pin_pairs(ladder, omegas)
    freqs = ladder.clone()
    freqs[index] = torch.tensor(omegas, dtype=torch.float64)
    return freqs, index


class PeriodicRoPE(RoPE):
    """RoPE with pairs pinned to known periods, after "RoFormer: Enhanced Transformer with Rotary
    Position Embedding" (Su et al., 2021); the pinning is this project's, motivated by DNA's
    3-bp codon and ~10.5-bp helical-turn periodicities and by daily/weekly cycles (48 and 336
    half-hours) in time series.

    Pinned pair j rotates by 2π/period_j per position, so it repeats exactly with that period.
    Which pair each period takes: :func:`pin_pairs` (the unused pair whose ladder frequency is
    closest in log-frequency, periods taken in the given order); the other pairs keep their
    ladder frequencies base^(−2i/Dh). Inference-time scaling never changes the pinned pairs
    (a codon stays 3 bp long at any context length).

    Args:
        periods: periods in positions, each ≥ 2 (see :func:`posenc.periods_from_data`).
        learnable: learn every pair's frequency, as ω·e^δ with δ a parameter starting at 0 (the
            periods are then only the initial values).
        base, layout, scaling: as :class:`RoPE`.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("rotate",))

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        periods: Sequence[float] = (3.0, 10.5),
        learnable: bool = False,
        base: float = 10000.0,
        layout: Layout = "interleaved",
        scaling: RopeScaling | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, base=base, layout=layout, scaling=scaling)
        self.periods = check_periods(periods, self.n_pairs)
        freqs, self.pinned_index = periodic_frequencies(self.rotary_dim, base, self.periods)
        self.learned_frequencies = bool(learnable)
        self._fixed_freqs = freqs  # (Dh/2,) float64, CPU: the pinned periods exactly
        if self.learned_frequencies:
            self.log_freq_offset = log_offset(freqs, True)  # (Dh/2,) δ in ω₀·e^δ, zero at init

    def frequencies(self) -> Tensor:
        if self.learned_frequencies:
            return offset_frequencies(self._fixed_freqs, self.log_freq_offset)  # (Dh/2,)
        return self._fixed_freqs

    def pinned(self) -> Tensor:
        mask = torch.zeros(self.n_pairs, dtype=torch.bool)
        mask[self.pinned_index] = True
        return mask  # (n_pairs,)


# ------------------------------------------------------------------------------ XPos math


def xpos_zeta(head_dim: int, gamma: float = 0.4) -> Tensor:
    """Per-pair decay bases ζ_i = (2i/Dh + γ)/(1 + γ), i = 0..Dh/2−1, in float64 (Sun et al., 2022)."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return (2.0 * i / head_dim + gamma) / (1.0 + gamma)  # (Dh/2,)


def xpos_log_scale(pos: Tensor, zeta: Tensor, scale_base: float) -> Tensor:
    """log of ζ_i^(n/B) for (centred) positions ``pos`` (B', T): (B', 1, T, Dh/2)."""
    return pos[:, None, :, None] / scale_base * zeta.log()  # (B', 1, T, Dh/2)


class XPos(RoPE):
    """Extrapolatable position embedding, "A Length-Extrapolatable Transformer" (Sun, Dong, Patra,
    Ma, Huang, Benhaim, Chaudhary, Song and Wei, 2022).

    RoPE rotation, then pair i of the query at position m is multiplied by ζ_i^(m/B) and of the
    key at position n by ζ_i^(−n/B), with ζ_i = (2i/Dh + γ)/(1 + γ) (γ = 0.4) and B =
    ``scale_base`` (512), as in the authors' torchscale code. The logit of pair i then carries
    ζ_i^((m−n)/B): a decay with distance for keys before the query (the scheme is meant for causal
    attention; in a bidirectional encoder keys after the query are amplified instead).

    Overflow: only m − n matters, so positions are centred first, n ↦ n − c with c the midpoint of
    the query and key positions of the batch row. The exponents are then at most
    (span/2)/B·|ln ζ_0| ≈ 1.25·span/(2B), computed in float32 (float64 for float64 positions);
    spans whose scale would leave float32 (|exponent| > 80: about 65 000 positions at B = 512)
    raise :class:`PosencError` instead of producing inf/NaN.

    Args:
        gamma: the γ in ζ_i (0.4 in the paper).
        scale_base: B (512 in the paper).
        base, layout, scaling: as :class:`RoPE`.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("rotate",))
    max_exponent: ClassVar[float] = 80.0  # e^80 ≈ 5.5e34 < float32 max 3.4e38

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        gamma: float = 0.4,
        scale_base: float = 512.0,
        base: float = 10000.0,
        layout: Layout = "interleaved",
        scaling: RopeScaling | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, base=base, layout=layout, scaling=scaling)
        if not gamma > 0:
            raise PosencError(f"XPos gamma must be > 0, got {gamma}")
        if not scale_base > 0:
            raise PosencError(f"XPos scale_base must be > 0, got {scale_base}")
        self.gamma, self.scale_base = gamma, scale_base
        self.zeta = xpos_zeta(self.rotary_dim, gamma)  # (n_pairs,) float64, CPU

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        q, k = super().rotate(q, k, q_pos, k_pos)  # (B, H, T, Dh) each
        lo, hi = position_bounds(q_pos, k_pos)  # (B',) each
        worst = float((hi - lo).max()) / 2 / self.scale_base * -math.log(float(self.zeta[0]))
        if worst > self.max_exponent:
            raise PosencError(
                f"XPos: a span of {float((hi - lo).max()) + 1:g} positions overflows the "
                f"ζ^(n/B) scale in float32 with scale_base={self.scale_base}; raise scale_base"
            )
        centre = (lo + hi) / 2  # (B',)
        return self._decay(q, q_pos, centre, 1.0), self._decay(k, k_pos, centre, -1.0)

    def _decay(self, x: Tensor, pos: Tensor, centre: Tensor, sign: float) -> Tensor:
        """Multiply the rotated features of ``x`` (B, H, T, Dh) by ζ^(±(pos − centre)/B) pairwise."""
        dtype = torch.float64 if pos.dtype == torch.float64 else torch.float32
        r = self.rotary_dim
        with torch.autocast(device_type=pos.device.type, enabled=False):
            p = as_batched(pos).to(work_dtype(pos.device)) - centre[:, None].to(pos.device)  # (B', T)
            zeta = self.zeta.to(device=pos.device, dtype=p.dtype)
            log_s = sign * xpos_log_scale(p, zeta, self.scale_base)  # (B', 1, T, r/2)
            scale = pair_to_features(log_s.exp().to(dtype), self.layout)  # (B', 1, T, r)
            decayed = (x[..., :r].to(dtype) * scale).to(x.dtype)  # (B, H, T, r)
        return decayed if r == x.shape[-1] else torch.cat((decayed, x[..., r:]), dim=-1)  # (B, H, T, Dh)
