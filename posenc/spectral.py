"""Input-side encodings built from smooth functions of the position: sinusoids with learned parts,
complex exponentials, random Fourier features and Gaussian radial basis functions.

Two trainable sinusoids live here and are not interchangeable: :class:`TrainableSinusoidal` learns
the frequencies (a function of the position, defined everywhere) and :class:`SinusoidalOffset`
learns a free correction per position (a table, undefined past ``max_len``).

Each class is an :class:`~posenc.absolute.AbsoluteEncoding` (add or concat integration) and only
implements ``table``. Position × frequency products are formed in float64 and the table is cast
to float32 (float64 when the positions are float64, which the tests use for exact references).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn

from posenc._numerics import (
    TWO_PI,
    log_offset,
    offset_frequencies,
    out_dtype,
    pad_features,
    require_integers,
    work_dtype,
)
from posenc.absolute import AbsoluteEncoding, Integration, sinusoidal_table
from posenc.base import PosencError, SchemeMeta, check_max_len

# --------------------------------------------------------------------------------- pure math


def fourier_pairs(pos: Tensor, freqs: Tensor, cos_first: bool = False) -> Tensor:
    """Interleaved (sin, cos) — or (cos, sin) — of pos·ω_j for positions S and frequencies (m,).

    Returns S + (2m,): [sin ω_0 p, cos ω_0 p, sin ω_1 p, …] (the layout of :func:`sinusoidal_table`).
    """
    work = work_dtype(pos.device)
    angles = pos.to(work)[..., None] * freqs.to(pos.device, work)  # S + (m,)
    pair = (angles.cos(), angles.sin()) if cos_first else (angles.sin(), angles.cos())
    return torch.stack(pair, dim=-1).flatten(-2).to(out_dtype(pos))  # S + (2m,)


def geometric_frequencies(n: int, dim: int, base: float) -> Tensor:
    """Vaswani ladder ω_j = base^(−2j/dim), j = 0..n−1, float64 (n,)."""
    return base ** (-2.0 * torch.arange(n, dtype=torch.float64) / dim)


def random_fourier_frequencies(n: int, sigma: float, seed: int) -> Tensor:
    """b_j ~ N(0, σ²), j = 0..n−1, float64, drawn from a CPU generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(int(seed))
    return sigma * torch.randn(n, generator=gen, dtype=torch.float64)  # (n,)


def random_fourier_table(pos: Tensor, b: Tensor) -> Tensor:
    """Tancik et al. (2020) features [cos(2π p b), sin(2π p b)] as S + (2m,) (cos block first)."""
    work = work_dtype(pos.device)
    angles = TWO_PI * pos.to(work)[..., None] * b.to(pos.device, work)  # S + (m,)
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(out_dtype(pos))  # S + (2m,)


def rbf_centres(n: int, train_len: float, extent: float = 1.0) -> Tensor:
    """n centres c_k = k·extent·train_len/n over [0, extent·train_len), float64 (n,)."""
    return torch.arange(n, dtype=torch.float64) * (extent * train_len / n)


def gaussian_rbf_table(pos: Tensor, centres: Tensor, sigma: float) -> Tensor:
    """exp(−(p − c_k)²/(2σ²)) for positions S and centres (n,): S + (n,), in (0, 1]."""
    work = work_dtype(pos.device)
    d = pos.to(work)[..., None] - centres.to(pos.device, work)  # S + (n,)
    return torch.exp(-0.5 * (d / sigma) ** 2).to(out_dtype(pos))


# --------------------------------------------------------------------------------- schemes


class TrainableSinusoidal(AbsoluteEncoding):
    """Learnable sinusoidal absolute encoding, "On Position Embeddings in BERT" (Wang, Shang,
    Lioma, Jiang, Yang, Liu and Simonsen, 2021), plus a learned linear offset.

    P(p) = S(p) + S(p)·Wᵀ, with S(p) = [sin ω_0 p, cos ω_0 p, …] the Vaswani table and W a
    (Dp × Dp) matrix initialised to zero; with ``learn_frequencies`` the ω_j are parameters too
    (ω_j = ω⁰_j·e^{δ_j} with ω⁰_j = base^(−2j/Dp) and δ_j learned from 0). At initialisation P equals
    :class:`~posenc.Sinusoidal`. The learned part is a map of the features, not a per-position
    table, so the scheme is defined at every real position.

    Which trainable sinusoid is which: this one keeps the sinusoid's functional form and learns
    its frequencies (Wang et al.'s "learnable sinusoidal APE"), so it takes float timestamps and
    any test length. :class:`~posenc.SinusoidalOffset` is the other reading of "trainable
    sinusoid", a sinusoid plus a learned offset per position (P = S + δ), as free as
    :class:`~posenc.Learned` and like it undefined past ``max_len``. Both are kept so a comparison
    can tell learning a few frequencies apart from learning every position.

    Args:
        base: initial wavelength base.
        learn_frequencies: learn the ω_j (the paper's learnable sinusoid) as well as W.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        base: float = 10000.0,
        learn_frequencies: bool = True,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        if self.table_dim % 2:
            raise PosencError(f"TrainableSinusoidal needs an even table width, got {self.table_dim}")
        if base <= 1:
            raise PosencError(f"TrainableSinusoidal base must be > 1, got {base}")
        self.freqs0 = geometric_frequencies(self.table_dim // 2, self.table_dim, base)  # (Dp/2,) float64
        self.log_freq_offset = log_offset(self.freqs0, learn_frequencies)  # (Dp/2,)
        self.offset = nn.Linear(self.table_dim, self.table_dim, bias=False)
        nn.init.zeros_(self.offset.weight)

    def frequencies(self) -> Tensor:
        """The current angular frequencies ω_j (Dp/2,) in float64."""
        return offset_frequencies(self.freqs0, self.log_freq_offset)

    def table(self, pos: Tensor) -> Tensor:
        s = fourier_pairs(pos, self.frequencies())  # (B', T, Dp)
        return s + self.offset(s.to(self.offset.weight.dtype)).to(s.dtype)


class SinusoidalOffset(AbsoluteEncoding):
    """Sinusoid plus a learned offset per position: P[p] = S(p) + δ[p], δ from zero (no single
    source paper; a learned table started at the sinusoid).

    S is the fixed table of "Attention Is All You Need" (Vaswani et al., 2017) and δ a learned
    (``max_len`` × Dp) table like that of "Convolutional Sequence to Sequence Learning" (Gehring
    et al., 2017), initialised to zero, so at initialisation P equals :class:`~posenc.Sinusoidal`.
    The gradient of P and of δ coincide and the tasks do not weight-decay encoding parameters, so
    training it is training a :class:`~posenc.Learned` table initialised at the sinusoid; keeping
    S outside the parameters makes δ (what training changed) readable on its own. Like
    :class:`~posenc.Learned` it is undefined at positions ``>= max_len`` (and at fractional ones):
    asking for one raises :class:`~posenc.base.PositionOutOfRange` naming both numbers.

    Which trainable sinusoid is which: this is the per-position reading (δ_ij for every position
    i and feature j); :class:`~posenc.TrainableSinusoidal` learns the frequencies instead (Wang et
    al., 2021, "On Position Embeddings in BERT") and stays defined at every real position. Both
    are kept so a comparison can tell learning every position apart from learning a few frequencies.

    Args:
        max_len: number of positions in the offset table.
        base: wavelength base of the sinusoid (10000 in Vaswani et al.).
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",), extrapolates=False)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        max_len: int = 1024,
        base: float = 10000.0,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        if self.table_dim % 2:
            raise PosencError(f"SinusoidalOffset needs an even table width, got {self.table_dim}")
        max_len = check_max_len("SinusoidalOffset", max_len)
        if base <= 1:
            raise PosencError(f"SinusoidalOffset base must be > 1, got {base}")
        self.max_len, self.base = int(max_len), base
        self.freqs = geometric_frequencies(self.table_dim // 2, self.table_dim, base)  # (Dp/2,) float64
        self.delta = nn.Parameter(torch.zeros(self.max_len, self.table_dim))  # (max_len, Dp)

    def table(self, pos: Tensor) -> Tensor:
        require_integers(pos, "SinusoidalOffset")
        self.check_positions(pos)
        s = fourier_pairs(pos, self.freqs)  # (B', T, Dp)
        return s + self.delta[pos.long()]  # (B', T, Dp), in the wider of the two dtypes


class Hybrid(AbsoluteEncoding):
    """Sinusoidal ⊕ learned, concatenated and projected: P(p) = W·[S(p); E(p)] + b.

    No single source paper: it combines "Attention Is All You Need" (Vaswani et al., 2017)
    sinusoids with the learned table of "Convolutional Sequence to Sequence Learning" (Gehring
    et al., 2017). E(p) is a learned row for 0 ≤ p < ``train_len`` and zero elsewhere, so past the
    training length P falls back on the (projected) sinusoid and the scheme extrapolates without
    error. W is initialised to [I | 0] and b to 0, so P = S at initialisation.

    Args:
        train_len: rows of the learned table (the training length).
        base: sinusoid wavelength base.
        init_std: standard deviation of the learned table's initialisation.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        train_len: int = 512,
        base: float = 10000.0,
        init_std: float = 0.02,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        if int(train_len) != train_len or train_len < 1:
            raise PosencError(f"Hybrid train_len must be a positive integer, got {train_len!r}")
        if base <= 1:
            raise PosencError(f"Hybrid base must be > 1, got {base}")
        dp = self.table_dim
        self.train_len, self.base = int(train_len), base
        self.learned = nn.Parameter(torch.randn(self.train_len, dp) * init_std)  # (L, Dp)
        self.mix = nn.Linear(2 * dp, dp)
        with torch.no_grad():
            self.mix.weight.zero_()
            self.mix.weight[:, :dp] = torch.eye(dp)
            self.mix.bias.zero_()

    def table(self, pos: Tensor) -> Tensor:
        require_integers(pos, "Hybrid's learned part")
        inside = (pos >= 0) & (pos < self.train_len)  # (B', T)
        rows = self.learned[pos.long().clamp(0, self.train_len - 1)]  # (B', T, Dp)
        e = rows * inside[..., None].to(rows.dtype)  # (B', T, Dp), zero outside the table
        s = sinusoidal_table(pos, self.table_dim, self.base).to(rows.dtype)  # (B', T, Dp)
        return self.mix(torch.cat((s, e), dim=-1))  # (B', T, Dp)


class ComplexExponential(AbsoluteEncoding):
    """Position factor e^{i·ω_j·p} of "Encoding Word Order in Complex Embeddings" (Wang, Zhao,
    Lioma, Li, Zhang and Simonsen, 2020), as real pairs.

    P(p) = [cos ω_0 p, sin ω_0 p, cos ω_1 p, sin ω_1 p, …] (real part first), zero-padded to the
    table width when fewer than Dp/2 frequencies are given. Bounded in [−1, 1].

    Args:
        frequencies: angular frequencies ω_j in radians per position (at most Dp/2); default:
            the ladder base^(−2j/Dp), j < Dp/2.
        base: ladder base when ``frequencies`` is not given.
        learnable: learn the ω_j (as ω_j·e^{δ_j}, δ_j from 0; the paper learns them).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        frequencies: Sequence[float] | None = None,
        base: float = 10000.0,
        learnable: bool = False,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        n = self.table_dim // 2
        if frequencies is None:
            if base <= 1:
                raise PosencError(f"ComplexExponential base must be > 1, got {base}")
            freqs = geometric_frequencies(n, self.table_dim, base)
        else:
            freqs = torch.tensor([float(f) for f in frequencies], dtype=torch.float64)
            if not 0 < len(freqs) <= n or not bool((freqs > 0).all()) or not bool(freqs.isfinite().all()):
                raise PosencError(
                    f"ComplexExponential frequencies must be 1..{n} positive numbers, got {list(frequencies)}"
                )
        self.freqs0 = freqs  # (m,) float64, CPU: exact as configured
        self.log_freq_offset = log_offset(freqs, learnable)  # (m,)

    def frequencies(self) -> Tensor:
        """The current angular frequencies ω_j (m,) in float64."""
        return offset_frequencies(self.freqs0, self.log_freq_offset)

    def table(self, pos: Tensor) -> Tensor:
        pairs = fourier_pairs(pos, self.frequencies(), cos_first=True)  # (B', T, 2m)
        return pad_features(pairs, self.table_dim)  # (B', T, Dp)


class RandomFourier(AbsoluteEncoding):
    """Random Fourier features, "Fourier Features Let Networks Learn High Frequency Functions in
    Low Dimensional Domains" (Tancik, Srinivasan, Mildenhall, Fridovich-Keil, Raghavan, Singhal,
    Ramamoorthi, Barron and Ng, 2020).

    P(p) = [cos(2π p b), sin(2π p b)] (all cosines, then all sines) with b ∈ R^(Dp/2) fixed,
    b_j ~ N(0, σ²) drawn from a generator seeded with ``seed`` (the same b on every machine).
    σ is in cycles per position: periods are ~1/σ positions. Bounded in [−1, 1].

    Args:
        sigma: standard deviation σ of the frequencies (cycles per position).
        seed: seed of the frequency draw.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        sigma: float = 0.1,
        seed: int = 0,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        if self.table_dim % 2:
            raise PosencError(f"RandomFourier needs an even table width, got {self.table_dim}")
        if not (sigma > 0 and math.isfinite(sigma)):
            raise PosencError(f"RandomFourier sigma must be a positive number, got {sigma}")
        self.sigma, self.seed = sigma, seed
        self.b = random_fourier_frequencies(self.table_dim // 2, sigma, seed)  # (Dp/2,) float64, CPU

    def table(self, pos: Tensor) -> Tensor:
        return random_fourier_table(pos, self.b)  # (B', T, Dp)


class GaussianRBF(AbsoluteEncoding):
    """Gaussian radial-basis features of the position, φ_k(p) = exp(−(p − c_k)²/(2σ²)), after
    "Fast Learning in Networks of Locally-Tuned Processing Units" (Moody and Darken, 1989).

    n centres c_k = k·extent·train_len/n spread over [0, extent·train_len); ``extent`` = 1 keeps
    them in the training range (features fade to 0 past it, so the encoding vanishes there),
    ``extent`` > 1 extends them over longer test lengths. Zero-padded to the table width;
    bounded in [0, 1].

    Args:
        train_len: training length the centres are laid over.
        n_centres: number of centres (default: the table width).
        sigma: width σ in positions (default: the centre spacing extent·train_len/n).
        extent: how far the centres reach, as a multiple of ``train_len``.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",))

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        train_len: int = 128,
        n_centres: int | None = None,
        sigma: float | None = None,
        extent: float = 1.0,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        n = self.table_dim if n_centres is None else n_centres
        if not 1 <= n <= self.table_dim:
            raise PosencError(f"GaussianRBF n_centres must be in 1..{self.table_dim}, got {n_centres}")
        if not train_len > 0:
            raise PosencError(f"GaussianRBF train_len must be positive, got {train_len}")
        if not extent > 0:
            raise PosencError(f"GaussianRBF extent must be positive, got {extent}")
        self.sigma = extent * train_len / n if sigma is None else sigma
        if not self.sigma > 0:
            raise PosencError(f"GaussianRBF sigma must be positive, got {sigma}")
        self.centres = rbf_centres(n, train_len, extent)  # (n,) float64, CPU

    def table(self, pos: Tensor) -> Tensor:
        return pad_features(gaussian_rbf_table(pos, self.centres, self.sigma), self.table_dim)
