"""The RoPE-scaling value (:class:`posenc.RopeScaling`) and its registry: each type's frequencies and
attention factor against float64 references written from its paper or its authors' released code
(Python ``math``, not the module's functions), partial rotation on every rotary scheme, the value's
one-line refusals, its round trip through a spec, and a type registered from outside."""

from __future__ import annotations

import io
import math

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import PeriodicRoPE, PosencError, RoPE, RopeScaling, XPos, build_encoding
from posenc.rope_scaling import SCALINGS, register_scaling

BASE = 10000.0


def ladder(dh: int, base: float = BASE) -> list[float]:
    return [base ** (-2 * i / dh) for i in range(dh // 2)]


def close(got: torch.Tensor, ref: list[float], rel: float = 1e-12) -> None:
    torch.testing.assert_close(got.double(), torch.tensor(ref, dtype=torch.float64), rtol=rel, atol=0.0)


# ------------------------------------------------------------------------------ llama3
def llama3_ref(dh: int, train_len: int, s: float, low: float, high: float) -> list[float]:
    """Llama 3.1's rule as its release describes it: a band whose wavelength 2π/θ is under
    train_len/high stays, one over train_len/low is divided by s, and one between is mixed with
    σ = (train_len/λ − low)/(high − low): (1 − σ)·θ/s + σ·θ."""
    out = []
    for w in ladder(dh):
        wavelen = 2 * math.pi / w
        if wavelen < train_len / high:
            out.append(w)
        elif wavelen > train_len / low:
            out.append(w / s)
        else:
            sigma = (train_len / wavelen - low) / (high - low)
            out.append((1 - sigma) * w / s + sigma * w)
    return out


@pytest.mark.parametrize(("train_len", "s", "low", "high"), [(128, 8.0, 1.0, 4.0), (64, 2.0, 2.0, 8.0)])
def test_llama3_matches_its_band_rule(train_len, s, low, high):
    pe = RoPE(64, 2, scaling=RopeScaling("llama3", factor=s, train_len=train_len, low_freq_factor=low,
                                         high_freq_factor=high))
    ref = llama3_ref(32, train_len, s, low, high)
    close(pe.scaled_frequencies(), ref)
    kept = [w == r for w, r in zip(ladder(32), ref, strict=True)]
    divided = [abs(r - w / s) < 1e-15 for w, r in zip(ladder(32), ref, strict=True)]
    assert any(kept) and any(divided) and not all(a or b for a, b in zip(kept, divided, strict=True))
    assert pe.attention_factor() == 1.0


# ------------------------------------------------------------------------------ longrope
def test_longrope_divides_by_short_then_long_factors_and_scales_attention():
    """LongRoPE (Ding et al., 2024) as Phi-3 runs it: θ_i/short_i while the span L ≤ L₀, θ_i/long_i past
    it, and √(1 + ln s / ln L₀) on q and k; the span is that of the query and key positions."""
    short, long = [1.0, 1.1, 1.3, 2.0], [1.0, 2.0, 5.0, 16.0]
    pe = RoPE(16, 2, scaling=RopeScaling("longrope", factor=16.0, train_len=32, short_factor=short,
                                         long_factor=long))
    rows = pe.scaled_frequencies(torch.tensor([32.0, 33.0]))  # (2, 4): at L₀, one past it
    close(rows[0], [w / f for w, f in zip(ladder(8), short, strict=True)])
    close(rows[1], [w / f for w, f in zip(ladder(8), long, strict=True)])
    factor = math.sqrt(1 + math.log(16.0) / math.log(32))
    assert pe.attention_factor() == pytest.approx(factor, rel=1e-15)
    q, k = torch.randn(2, 1, 2, 40, 8, dtype=torch.float64)
    for n, divisors in ((32, short), (40, long)):
        pos = torch.arange(n, dtype=torch.float64)
        plain = RoPE(16, 2, scaling={"type": "longrope", "factor": 1.0, "train_len": 32,
                                     "short_factor": divisors, "long_factor": divisors})
        got = logits(pe, q[..., :n, :], k[..., :n, :], pos)
        torch.testing.assert_close(got, factor**2 * logits(plain, q[..., :n, :], k[..., :n, :], pos))
    assert RoPE(16, 2, scaling={"type": "longrope", "factor": 16.0, "train_len": 32, "short_factor": short,
                                "long_factor": long, "attention_factor": 0.5}).attention_factor() == 0.5


def logits(pe, q, k, pos) -> torch.Tensor:
    q2, k2 = pe.rotate(q, k, pos, pos)
    return q2 @ k2.transpose(-1, -2)  # (B, H, T, T)


# ------------------------------------------------------------------------------ yarn knobs
def yarn_ref(dh: int, train_len: int, s: float, fast: float, slow: float, truncate: bool) -> list[float]:
    """YaRN's frequencies as its authors' code forms them: the pair index where a band makes β
    rotations over train_len, (d/2)·log_base(train_len/(2πβ)), floored/ceiled if ``truncate``, a linear
    ramp between the two (widened by 0.001 when empty), mixing θ/s and θ."""
    def where(beta: float) -> float:
        return dh / 2 * math.log(train_len / (2 * math.pi * beta), BASE)

    lo, hi = where(fast), where(slow)
    lo, hi = (math.floor(lo), math.ceil(hi)) if truncate else (lo, hi)
    lo, hi = max(lo, 0), min(hi, dh - 1)
    hi = hi + 0.001 if hi == lo else hi
    gammas = [1 - min(max((i - lo) / (hi - lo), 0.0), 1.0) for i in range(dh // 2)]
    return [(1 - g) * w / s + g * w for g, w in zip(gammas, ladder(dh), strict=True)]


@pytest.mark.parametrize(("fast", "slow"), [(32.0, 1.0), (16.0, 2.0), (1.0, 1.0), (5.0, 5.0)])
@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_reads_beta_and_truncate(fast, slow, truncate):
    pe = RoPE(128, 2, scaling=RopeScaling("yarn", factor=8.0, train_len=2048, beta_fast=fast, beta_slow=slow,
                                          truncate=truncate))
    close(pe.scaled_frequencies(), yarn_ref(64, 2048, 8.0, fast, slow, truncate))


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 200.0), st.floats(1.0, 50.0), st.floats(1.0, 64.0), st.booleans())
def test_yarn_factors_stay_between_interpolation_and_none(slow, ratio, s, truncate):
    """For any β_fast ≥ β_slow > 0: each θ'_i/θ_i lies in [1/s, 1] and never grows with i."""
    pe = RoPE(64, 2, scaling=RopeScaling("yarn", factor=s, train_len=512, beta_fast=slow * ratio,
                                         beta_slow=slow, truncate=truncate))
    f = (pe.scaled_frequencies() / pe.frequencies()).tolist()
    assert all(1 / s - 1e-12 <= x <= 1 + 1e-12 for x in f)
    assert all(a >= b - 1e-12 for a, b in zip(f, f[1:], strict=False))


@pytest.mark.parametrize(("knobs", "want"), [
    ({}, 0.1 * math.log(40) + 1),
    ({"mscale": 0.707, "mscale_all_dim": 0.707}, 1.0),  # DeepSeek-V2
    ({"mscale": 1.0, "mscale_all_dim": 0.5}, (0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1)),
    ({"attention_factor": 1.25}, 1.25),
])
def test_yarn_attention_factor_on_q_and_k(knobs, want):
    pe = RoPE(16, 2, scaling=RopeScaling("yarn", factor=40.0, train_len=32, **knobs))
    assert pe.attention_factor() == pytest.approx(want, rel=1e-15)
    plain = RoPE(16, 2, scaling=RopeScaling("yarn", factor=40.0, train_len=32, attention_factor=1.0))
    q, k = torch.randn(2, 1, 2, 9, 8, dtype=torch.float64)
    pos = torch.arange(9.0, dtype=torch.float64) * 5
    torch.testing.assert_close(logits(pe, q, k, pos), want**2 * logits(plain, q, k, pos))


# ------------------------------------------------------------------------------ partial rotation
def rotate_first(x: list[float], p: float, freqs: list[float], r: int, layout: str,
                 m: float = 1.0) -> list[float]:
    """Su et al.'s pair rotation on the first ``r`` features only (pairs (2i, 2i+1) or (i, i + r/2)),
    times ``m``; the others as they are (GPT-NeoX's rotary_pct)."""
    out = list(x)
    for i, w in enumerate(freqs):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
        c, s = math.cos(p * w), math.sin(p * w)
        out[a], out[b] = m * (x[a] * c - x[b] * s), m * (x[a] * s + x[b] * c)
    return out


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("kind", ["none", "yarn"])
def test_partial_rotation_turns_the_first_features_only(layout, kind):
    scaling = {"type": kind, "partial_rotary_factor": 0.5}
    if kind == "yarn":
        scaling.update(factor=4.0, train_len=8)
    pe = RoPE(32, 2, layout=layout, scaling=scaling)  # Dh 16: 8 features rotate, 4 pairs
    assert (pe.rotary_dim, pe.n_pairs) == (8, 4)
    freqs, m = pe.scaled_frequencies().tolist(), pe.attention_factor()
    if kind == "none":
        assert freqs == ladder(8)  # the ladder of the rotated features, base^(−2i/8)
    q, k = torch.randn(2, 1, 2, 5, 16, dtype=torch.float64)
    pos = [0.0, 3.0, 17.0, 400.0, 65000.0]
    got, _ = pe.rotate(q, k, torch.tensor(pos, dtype=torch.float64), torch.tensor(pos, dtype=torch.float64))
    for t, p in enumerate(pos):
        ref = rotate_first(q[0, 1, t].tolist(), p, freqs, 8, layout, m)
        close(got[0, 1, t], ref, rel=1e-10)


def test_partial_rotation_in_periodic_rope_and_xpos():
    """PeriodicRoPE pins its periods among the rotated pairs; XPos decays the rotated features alone,
    with ζ_i = (2i/r + γ)/(1 + γ) over the r rotated ones (as rotary-embedding-torch does)."""
    half = {"partial_rotary_factor": 0.5}
    pp = PeriodicRoPE(32, 2, periods=[3.0], scaling=half)
    assert pp.frequencies().shape == (4,) and 2 * math.pi / 3.0 in pp.frequencies().tolist()
    xp = XPos(32, 2, scale_base=64.0, scaling=half)
    q, k = torch.randn(2, 1, 2, 3, 16, dtype=torch.float64)
    pos = [0.0, 5.0, 30.0]
    t = torch.tensor(pos, dtype=torch.float64)
    oq, ok = xp.rotate(q, k, t, t)
    zeta = [(2 * i / 8 + 0.4) / 1.4 for i in range(4)]
    centre = (min(pos) + max(pos)) / 2
    for n, p in enumerate(pos):
        rq = rotate_first(q[0, 0, n].tolist(), p, ladder(8), 8, "interleaved")
        rk = rotate_first(k[0, 0, n].tolist(), p, ladder(8), 8, "interleaved")
        want_q = [v * zeta[j // 2] ** ((p - centre) / 64.0) if j < 8 else v for j, v in enumerate(rq)]
        want_k = [v * zeta[j // 2] ** (-(p - centre) / 64.0) if j < 8 else v for j, v in enumerate(rk)]
        close(oq[0, 0, n], want_q, rel=1e-10)
        close(ok[0, 0, n], want_k, rel=1e-10)


# ------------------------------------------------------------------------------ the value
@pytest.mark.parametrize(("scaling", "message"), [
    ({"type": "cubic"}, "type must be one of"),
    ({"type": "linear", "factor": 2.0, "beta_fast": 8.0}, "'linear' does not read beta_fast"),
    ({"type": "none", "factor": 2.0}, "'none' does not read factor"),
    ({"type": "yarn", "factor": 2.0, "train_len": 64, "beta_fast": 1.0, "beta_slow": 2.0},
     "beta_fast >= beta_slow"),
    ({"type": "yarn", "factor": 2.0, "train_len": 64, "mscale": 1.0}, "mscale and mscale_all_dim act"),
    ({"type": "yarn", "factor": 2.0, "train_len": 64, "attention_factor": 1.1, "mscale": 1.0,
      "mscale_all_dim": 1.0}, "replaces mscale"),
    ({"type": "dynamic_ntk"}, "needs train_len"),
    ({"type": "llama3", "factor": 8.0, "train_len": 64, "low_freq_factor": 4.0}, "high_freq_factor > low"),
    ({"type": "longrope", "train_len": 64, "short_factor": [1.0] * 4}, "short_factor and long_factor"),
    ({"type": "longrope", "train_len": 64, "short_factor": [1.0] * 3, "long_factor": [1.0] * 3},
     "3 values for 4"),
    ({"partial_rotary_factor": 0.4}, "gives 3 features"),  # Dh 8
    ({"partial_rotary_factor": 1.5}, r"in \(0, 1\]"),
    ({"type": "yarn", "factor": 2.0, "train_len": 64, "colour": 1}, r"unknown key\(s\) \['colour'\]"),
])
def test_the_value_refuses_what_would_not_act(scaling, message):
    with pytest.raises(PosencError, match=message):
        RoPE(16, 2, scaling=scaling)


def test_the_value_round_trips_through_a_spec_a_yaml_and_a_weights_only_checkpoint():
    pe = XPos(32, 2, scaling=RopeScaling("longrope", factor=8.0, train_len=16, short_factor=(1.0,) * 4,
                                         long_factor=[1, 2, 3, 4], partial_rotary_factor=0.5))
    spec = pe.spec()
    assert spec["init_args"]["scaling"]["long_factor"] == [1.0, 2.0, 3.0, 4.0]
    buf = io.BytesIO()
    torch.save(spec, buf)
    buf.seek(0)
    for again in (yaml.safe_load(yaml.safe_dump(spec)), torch.load(buf, weights_only=True)):
        rebuilt = build_encoding(again, 32, 2)
        assert rebuilt.scaling == pe.scaling and rebuilt.attention_factor() == pe.attention_factor()


def test_from_hf_reads_hugging_face_names():
    assert RopeScaling.from_hf({"rope_type": "default"}) == RopeScaling()
    dynamic = RopeScaling("dynamic_ntk", 2.0, 4096)
    assert RopeScaling.from_hf({"type": "dynamic", "factor": 2.0}, 4096) == dynamic
    assert RopeScaling.from_hf({"rope_type": "yarn", "original_max_position_embeddings": 4096}, 163840) == \
        RopeScaling("yarn", factor=40.0, train_len=4096)
    with pytest.raises(PosencError, match="rope_theta is the scheme's base"):
        RopeScaling.from_hf({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6})


def test_a_registered_type_reaches_every_rotary_scheme(monkeypatch):
    """A type added with ``register_scaling`` is one the value accepts and every rotary scheme applies
    (PeriodicRoPE's pinned pairs left alone)."""
    monkeypatch.setitem(SCALINGS, "halve", SCALINGS["none"])  # restored afterwards

    @register_scaling("halve", ("factor",))
    def halve(s, ladder_, span):
        return ladder_.freqs / 2, s.factor

    pe = PeriodicRoPE(16, 2, periods=[3.0], scaling={"type": "halve", "factor": 1.5})
    f, g = pe.frequencies(), pe.scaled_frequencies()
    pinned = pe.pinned()
    assert torch.equal(g[pinned], f[pinned]) and torch.equal(g[~pinned], f[~pinned] / 2)
    assert pe.attention_factor() == 1.5
