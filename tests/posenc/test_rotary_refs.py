"""Rotary schemes against float64 references written from their papers, plus their properties.

References rotate each 2-D pair with Python ``math`` from the paper's formulas (RoFormer, xPos,
position interpolation, NTK-aware, dynamic NTK, YaRN), independently of the module's code.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import PeriodicRoPE, PosencError, RoPE, RopeScaling, XPos
from posenc.nn.transformer import Transformer

D, H = 16, 2
DH = D // H
SETTINGS = settings(max_examples=30, deadline=None)
POS = [0.0, 1.0, 5.0, 77.0, 1000.5, 65432.0]


def ladder(base: float = 10000.0, dh: int = DH) -> list[float]:
    return [base ** (-2 * i / dh) for i in range(dh // 2)]


def pair_index(i: int, layout: str, dh: int = DH) -> tuple[int, int]:
    return (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + dh // 2)


def rotate_ref(x: list[float], p: float, freqs: list[float], layout: str) -> list[float]:
    """Su et al. (2021), Eq. 13–14: each pair (a, b) ↦ (a cos pθ − b sin pθ, a sin pθ + b cos pθ)."""
    out = list(x)
    for i, w in enumerate(freqs):
        a, b = pair_index(i, layout, len(x))
        c, s = math.cos(p * w), math.sin(p * w)
        out[a], out[b] = x[a] * c - x[b] * s, x[a] * s + x[b] * c
    return out


def qk(t: int, seed: int = 0, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, H, t, DH, generator=g, dtype=dtype)
    return q, k


def logits_ref(q, k, pos: list[float], freqs: list[float], layout: str, factor: float = 1.0) -> torch.Tensor:
    """q'_m·k'_n for head 0 with q', k' rotated by the reference (times ``factor``)."""
    qr = [rotate_ref(q[0, 0, m].tolist(), p, freqs, layout) for m, p in enumerate(pos)]
    kr = [rotate_ref(k[0, 0, n].tolist(), p, freqs, layout) for n, p in enumerate(pos)]
    return factor * dots(qr, kr)


def dots(qr: list[list[float]], kr: list[list[float]]) -> torch.Tensor:
    """(Tq, Tk) float64 matrix of the dot products of two lists of vectors."""
    return torch.tensor([[sum(a * b for a, b in zip(x, y, strict=True)) for y in kr] for x in qr],
                        dtype=torch.float64)


def close64(got: torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


def logits(pe, q, k, pos: torch.Tensor) -> torch.Tensor:
    q2, k2 = pe.rotate(q, k, pos, pos)
    return (q2 @ k2.transpose(-1, -2))[0, 0].double()  # (T, T) of head 0


# ------------------------------------------------------------------------------ RoPE


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_rotation_matches_reference(layout):
    q, k = qk(len(POS))
    pos = torch.tensor(POS, dtype=torch.float64)
    got, _ = RoPE(D, H, layout=layout).rotate(q, k, pos, pos)
    for m, p in enumerate(POS):
        ref = rotate_ref(q[0, 1, m].tolist(), p, ladder(), layout)
        torch.testing.assert_close(got[0, 1, m], torch.tensor(ref, dtype=torch.float64), rtol=0, atol=1e-10)


def test_rope_tables_kept_between_calls_never_go_stale():
    """Equal positions reuse the cos/sin tables; other positions, or changed learnable
    frequencies, rebuild them (checked against a fresh scheme each time)."""
    q, k = qk(len(POS))
    pe = RoPE(D, H)
    for pos in (torch.tensor(POS, dtype=torch.float64), torch.tensor(POS, dtype=torch.float64) + 3):
        for _ in range(2):
            torch.testing.assert_close(pe.rotate(q, k, pos, pos), RoPE(D, H).rotate(q, k, pos, pos))
    learn = PeriodicRoPE(D, H, periods=[3.0, 10.5], learnable=True)
    pos = torch.arange(6.0)
    with torch.no_grad():
        before = learn.rotate(q[:, :, :6], k[:, :, :6], pos, pos)[0]
        for p in learn.parameters():
            p.add_(0.5)  # an optimizer step: the kept tables must not be reused
        after = learn.rotate(q[:, :, :6], k[:, :, :6], pos, pos)[0]
    fresh = PeriodicRoPE(D, H, periods=[3.0, 10.5], learnable=True)
    fresh.load_state_dict(learn.state_dict())
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, fresh.rotate(q[:, :, :6], k[:, :, :6], pos, pos)[0])


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@SETTINGS
@given(st.integers(0, 10**5), st.integers(-100, 100), st.integers(0, 10**6))
def test_rope_logit_depends_only_on_offset(layout, m, offset, shift):
    q, k = qk(2, seed=m % 7)
    pe = RoPE(D, H, layout=layout)
    pos = torch.tensor([m, m + offset], dtype=torch.float64)
    a, b = logits(pe, q, k, pos), logits(pe, q, k, pos + shift)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-7)


def test_rope_angles_exact_at_a_million_under_bf16_autocast():
    pe = RoPE(D, H)
    pos = torch.arange(10**6, 10**6 + 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = pe.angles(pos)[0, 0]  # (T, Dh/2)
    assert got.dtype == torch.float32
    ref = torch.tensor([[(p * w) % (2 * math.pi) for w in ladder()] for p in pos.tolist()],
                       dtype=torch.float64)
    err = torch.remainder(got.double() - ref + math.pi, 2 * math.pi) - math.pi
    assert err.abs().max().item() < 1e-5
    naive = pos.float()[:, None] * torch.tensor(ladder(), dtype=torch.float32)  # what float32 math gives
    naive_err = torch.remainder(naive.double() - ref + math.pi, 2 * math.pi) - math.pi
    assert naive_err.abs().max().item() > 1e-3  # so the check above would catch the naive product


def test_rope_model_in_bf16_is_shift_invariant_at_a_million():
    """A whole bf16-autocast Transformer gives the same outputs at positions t and 10^6 + t."""
    torch.manual_seed(0)
    m = Transformer(D, H, 2, RoPE(D, H), causal=True).eval()
    x = torch.randn(2, 32, D)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        near, far = m(x, torch.arange(32)).float(), m(x, torch.arange(32) + 10**6).float()
        other = m(x.flip(1), torch.arange(32)).float()
    gap = (near - far).abs().max().item()
    assert gap < 0.1 * (near - other).abs().max().item()  # bf16 rounding only, far below a real change
    assert gap < 0.06


# ------------------------------------------------------------------------------ inference-time scaling


def scaled_freqs(kind: str, s: float, span: float | None = None, train_len: int = 32) -> list[float]:
    """θ'_i from the papers: PI θ/s; NTK base·s^(d/(d−2)); dynamic NTK with s = L/train_len; YaRN."""
    if kind == "linear":
        return [w / s for w in ladder()]
    if kind in ("ntk", "dynamic_ntk"):
        if kind == "dynamic_ntk":
            s = max(1.0, s * span / train_len - (s - 1.0))
        return ladder(10000.0 * s ** (DH / (DH - 2)))
    if kind == "yarn_paper":
        return yarn_paper_ref(s, train_len)
    return [(1 - g) * w / s + g * w for g, w in zip(yarn_index_gammas(train_len), ladder(), strict=True)]


def yarn_paper_ref(s: float, train_len: int) -> list[float]:
    """YaRN as the paper's Eq. 17–19 are written (α = 1, β = 32): γ ramps over the rotation count r."""
    out = []
    for w in ladder():
        r = train_len / (2 * math.pi / w)
        gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
        out.append((1 - gamma) * w / s + gamma * w)
    return out


def yarn_index_gammas(train_len: int, dh: int = DH, base: float = 10000.0, fast: float = 32.0,
                      slow: float = 1.0) -> list[float]:
    """γ_i of YaRN as its authors' code runs it: linear in the pair index i between the (fractional)
    pairs that make ``fast`` and ``slow`` rotations over ``train_len``, floored/ceiled to whole pairs.

    Pair i turns train_len·base^(−2i/dh)/(2π) times; that equals β at i = log_base(train_len/(2πβ))·dh/2.
    """
    def where(beta: float) -> float:
        return math.log(train_len / (2 * math.pi * beta), base) * dh / 2

    lo, hi = max(math.floor(where(fast)), 0), min(math.ceil(where(slow)), dh - 1)
    hi = hi + 0.001 if hi == lo else hi
    return [1.0 - min(max((i - lo) / (hi - lo), 0.0), 1.0) for i in range(dh // 2)]


def test_yarn_ramps_over_the_pair_index_not_the_rotation_count():
    """The case of issue 41: d = 64, s = 4, L₀ = 2048. Pairs 9–20 differ between the two ramps; pair 15
    is ×0.60 with the index ramp (what Hugging Face and the authors' code run), ×0.33 with the paper's."""
    pe = RoPE(128, 2, scaling=RopeScaling("yarn", factor=4.0, train_len=2048))
    paper = RoPE(128, 2, scaling=RopeScaling("yarn_paper", factor=4.0, train_len=2048))
    base = [10000.0 ** (-2 * i / 64) for i in range(32)]
    got = [a / b for a, b in zip(pe.scaled_frequencies().tolist(), base, strict=True)]
    old = [a / b for a, b in zip(paper.scaled_frequencies().tolist(), base, strict=True)]
    want = [(1 - g) / 4 + g for g in yarn_index_gammas(2048, dh=64)]
    assert got == pytest.approx(want, rel=1e-12)
    assert got[15] == pytest.approx(0.60, abs=0.01) and old[15] == pytest.approx(0.33, abs=0.01)
    differ = [i for i in range(32) if abs(got[i] - old[i]) > 1e-9]
    assert differ == list(range(9, 21))


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn", "yarn_paper"])
def test_static_scalings_match_their_papers(kind):
    pe = RoPE(D, H, scaling=RopeScaling(kind, factor=4.0, train_len=32 if "yarn" in kind else None))
    q, k = qk(len(POS))
    factor = (0.1 * math.log(4.0) + 1.0) ** 2 if "yarn" in kind else 1.0  # YaRN temperature 1/t
    ref = logits_ref(q, k, POS, scaled_freqs(kind, 4.0), "interleaved", factor)
    close64(logits(pe, q, k, torch.tensor(POS, dtype=torch.float64)), ref)


@pytest.mark.parametrize("length", [16, 32, 100])
def test_dynamic_ntk_matches_reference_and_is_exact_within_train_len(length):
    pe = RoPE(D, H, scaling=RopeScaling("dynamic_ntk", train_len=32))
    q, k = qk(length)
    pos = [float(p) for p in range(length)]
    ref = logits_ref(q, k, pos, scaled_freqs("dynamic_ntk", 1.0, span=length), "interleaved")
    close64(logits(pe, q, k, torch.tensor(pos, dtype=torch.float64)), ref)
    if length <= 32:
        torch.testing.assert_close(ref, logits_ref(q, k, pos, ladder(), "interleaved"))


def test_scaling_options_are_checked():
    with pytest.raises(PosencError, match="train_len"):
        RoPE(D, H, scaling={"type": "yarn", "factor": 2.0})
    with pytest.raises(PosencError, match="factor"):
        RoPE(D, H, scaling={"type": "linear", "factor": 0.5})


# ------------------------------------------------------------------------------ PeriodicRoPE


@pytest.mark.parametrize("periods", [[3.0, 10.5], [48.0, 336.0]])
def test_periodic_rope_pins_exact_periods_and_keeps_the_ladder(periods):
    pe = PeriodicRoPE(D, H, periods=periods)
    freqs = pe.frequencies().tolist()
    pinned = pe.pinned_index
    assert [freqs[i] for i in pinned] == [2 * math.pi / p for p in periods]
    assert all(freqs[i] == w for i, w in enumerate(ladder()) if i not in pinned)


@pytest.mark.parametrize("periods, shift", [([3.0, 10.5], 21), ([48.0, 336.0], 336)])
@pytest.mark.parametrize("start", [0, 12_345, 10**6])
def test_periodic_rope_repeats_exactly_on_pinned_bands(periods, shift, start):
    """Rotated q at p and p + k·lcm(periods) agree on pinned pairs (float32 path, large p)."""
    pe = PeriodicRoPE(D, H, periods=periods)
    q, _ = qk(8, dtype=torch.float32)
    pos = torch.arange(start, start + 8)
    a, _ = pe.rotate(q, q, pos, pos)
    b, _ = pe.rotate(q, q, pos + shift, pos + shift)
    for i in pe.pinned_index:
        cols = list(pair_index(i, "interleaved"))
        torch.testing.assert_close(a[..., cols], b[..., cols], rtol=0, atol=2e-6)
    free = [c for i in range(DH // 2) if i not in pe.pinned_index for c in pair_index(i, "interleaved")]
    assert (a[..., free] - b[..., free]).abs().max() > 1e-3  # the other bands do move


def test_periodic_rope_pinned_bands_survive_scaling_and_learnable_starts_equal():
    fixed = PeriodicRoPE(D, H, periods=[3.0, 10.5])
    scaled = PeriodicRoPE(D, H, periods=[3.0, 10.5], scaling=RopeScaling("linear", factor=4.0))
    f, g = fixed.scaled_frequencies(), scaled.scaled_frequencies()
    assert torch.equal(f[fixed.pinned_index], g[scaled.pinned_index])
    assert torch.equal(PeriodicRoPE(D, H, periods=[3.0, 10.5], learnable=True).frequencies(), f)


# ------------------------------------------------------------------------------ XPos


def test_xpos_logits_match_reference():
    """Sun et al. (2022): q_m ↦ R_m q ⊙ ζ^(m/B), k_n ↦ R_n k ⊙ ζ^(−n/B), ζ_i = (2i/d + γ)/(1 + γ)."""
    pe = XPos(D, H, gamma=0.4, scale_base=64.0)
    q, k = qk(len(POS[:5]))
    pos = POS[:5]
    zeta = [(2 * i / DH + 0.4) / 1.4 for i in range(DH // 2)]
    scale = lambda x, p, sign: [v * zeta[j // 2] ** (sign * p / 64.0) for j, v in enumerate(x)]  # noqa: E731
    rot = lambda x, p: rotate_ref(x.tolist(), p, ladder(), "interleaved")  # noqa: E731
    qr = [scale(rot(q[0, 0, m], p), p, 1) for m, p in enumerate(pos)]
    kr = [scale(rot(k[0, 0, n], p), p, -1) for n, p in enumerate(pos)]
    ref = dots(qr, kr)
    close64(logits(pe, q, k, torch.tensor(pos, dtype=torch.float64)), ref)


def test_xpos_is_relative_and_refuses_overflow():
    pe = XPos(D, H)
    q, k = qk(6)
    pos = torch.tensor([0.0, 3, 9, 40, 41, 300], dtype=torch.float64)
    torch.testing.assert_close(logits(pe, q, k, pos), logits(pe, q, k, pos + 10**6), rtol=1e-9, atol=1e-9)
    with pytest.raises(PosencError, match="scale_base"):
        pe.rotate(q, k, torch.tensor([0.0, 0, 0, 0, 0, 1e6]), torch.tensor([0.0, 0, 0, 0, 0, 1e6]))
