"""Input-side schemes against float64 references written from their papers, plus their properties.

Every reference is a loop over positions and features with Python floats (``math``), independent
of the module's vectorised code; it reads only the module's parameters (perturbed first, so no
initial value is special).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import (
    Binary,
    ComplexExponential,
    ConditionalLearnedPE,
    ConditionalPE,
    ConvPE,
    GaussianRBF,
    GrayCode,
    Hybrid,
    Integer,
    Learned,
    PosencError,
    PositionOutOfRange,
    RandomFourier,
    Sinusoidal,
    SinusoidalOffset,
    TrainableSinusoidal,
)
from posenc.nn.transformer import Transformer

D, H = 8, 2
SETTINGS = settings(max_examples=30, deadline=None)
RANDOM_POS = torch.tensor([0.0, 1.0, 7.0, 63.5, 1000.0, 12345.25, 99999.0], dtype=torch.float64)


def perturbed(pe: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return pe.eval()


def table(pe, pos: torch.Tensor) -> torch.Tensor:
    """The scheme's table at ``pos`` (T,) as (T, Dp)."""
    return pe.table(pos[None])[0]


def vaswani(p: float, dim: int, base: float = 10000.0) -> list[float]:
    """PE(p, 2i) = sin(p/base^(2i/d)), PE(p, 2i+1) = cos(p/base^(2i/d))."""
    out = []
    for i in range(dim // 2):
        w = 1.0 / base ** (2 * i / dim)
        out += [math.sin(p * w), math.cos(p * w)]
    return out


def sinusoidal_rows(n: int, dim: int) -> torch.Tensor:
    """The Vaswani table for positions 0..n−1 as float64 (n, dim), from the Python reference."""
    return torch.tensor([vaswani(p, dim) for p in range(n)], dtype=torch.float64)


def close(got: torch.Tensor, ref, atol: float = 1e-9) -> None:
    ref = torch.as_tensor(ref, dtype=torch.float64)
    torch.testing.assert_close(got.detach().double(), ref, rtol=0, atol=atol)


# ------------------------------------------------------------------------------ sinusoidal family


def test_sinusoidal_worked_numbers_d4():
    """d = 4: columns sin(p), cos(p), sin(p/100), cos(p/100) at positions 0, 1, 2."""
    got = table(Sinusoidal(4, 1), torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64))
    expected = [
        [0.0, 1.0, 0.0, 1.0],
        [0.8414709848078965, 0.5403023058681398, 0.009999833334166664, 0.9999500004166653],
        [0.9092974268256817, -0.4161468365471424, 0.01999866669333308, 0.9998000066665778],
    ]
    close(got, expected, atol=1e-15)


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_sinusoidal_reference_and_float_positions(base):
    pe = Sinusoidal(D, H, base=base)
    close(table(pe, RANDOM_POS), [vaswani(p, D, base) for p in RANDOM_POS.tolist()])
    close(table(pe, RANDOM_POS.float()), [vaswani(p, D, base) for p in RANDOM_POS.tolist()], atol=2e-2)


@SETTINGS
@given(st.floats(0, 1e4), st.floats(0, 1e4), st.floats(-500, 500))
def test_sinusoidal_dot_product_depends_only_on_offset(t, u, shift):
    pe = Sinusoidal(16, 2)
    p = table(pe, torch.tensor([t, u, t + shift, u + shift], dtype=torch.float64))
    assert float(p[0] @ p[1]) == pytest.approx(float(p[2] @ p[3]), abs=1e-9)


@SETTINGS
@given(st.floats(0, 1e4), st.floats(-300, 300))
def test_sinusoidal_shift_is_a_linear_map_independent_of_position(t, k):
    """PE(t + k) = M_k·PE(t) with M_k block-diagonal 2×2 rotations that do not depend on t."""
    dim = 16
    m = torch.zeros(dim, dim, dtype=torch.float64)
    for i in range(dim // 2):
        a = k / 10000.0 ** (2 * i / dim)
        c, s = math.cos(a), math.sin(a)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    pe = Sinusoidal(dim, 2)
    p = table(pe, torch.tensor([t, t + k, t + 17.0, t + 17.0 + k], dtype=torch.float64))
    close(m @ p[0], p[1], atol=1e-9)
    close(m @ p[2], p[3], atol=1e-9)


def test_trainable_sinusoidal_starts_as_sinusoidal_and_matches_reference():
    pos = RANDOM_POS
    pe = TrainableSinusoidal(D, H)
    close(table(pe, pos), table(Sinusoidal(D, H), pos), atol=1e-6)  # float32 log-frequencies
    pe = perturbed(pe)
    w, omega = pe.offset.weight.double(), pe.frequencies()
    for row, p in zip(table(pe, pos), pos.tolist(), strict=True):
        s = [f(p * omega[j].item()) for j in range(D // 2) for f in (math.sin, math.cos)]
        ref = [s[a] + sum(w[a, b].item() * s[b] for b in range(D)) for a in range(D)]
        close(row, ref, atol=1e-5)


def test_trainable_sinusoidal_frequencies_learn_only_when_asked():
    assert TrainableSinusoidal(D, H).log_freq_offset.requires_grad
    assert not TrainableSinusoidal(D, H, learn_frequencies=False).log_freq_offset.requires_grad


def test_sinusoidal_offset_starts_as_sinusoidal_and_matches_reference():
    pos = torch.tensor([0.0, 1.0, 5.0, 17.0, 29.0], dtype=torch.float64)
    pe = SinusoidalOffset(D, H, max_len=30, base=500.0).double()
    close(table(pe, pos), table(Sinusoidal(D, H, base=500.0), pos), atol=1e-15)  # δ = 0
    pe = perturbed(pe)
    delta = pe.delta.detach()
    assert delta.abs().min() > 0  # every offset moved, so the reference reads real values
    ref = [[s + delta[int(p), a].item() for a, s in enumerate(vaswani(p, D, 500.0))] for p in pos.tolist()]
    close(table(pe, pos), ref, atol=1e-12)


def test_sinusoidal_offset_is_undefined_past_max_len_and_between_positions():
    pe = SinusoidalOffset(D, H, max_len=6)
    with pytest.raises(PositionOutOfRange, match="SinusoidalOffset defines positions 0..5.*6"):
        pe.embed(torch.zeros(1, 7, D), torch.arange(7))
    with pytest.raises(PosencError, match="integer"):
        table(pe, torch.tensor([1.5]))


def test_sinusoidal_offset_trains_like_a_learned_table_started_at_the_sinusoid():
    """P = S + δ: without weight decay an optimiser step moves it exactly as it moves a Learned
    table whose rows start at S (the two differ only in what the checkpoint stores)."""
    pos = torch.tensor([0.0, 3.0, 3.0, 7.0], dtype=torch.float64)  # float64: S is not rounded to float32
    x, every = torch.randn(2, 4, D, dtype=torch.float64), torch.arange(8, dtype=torch.float64)
    offset = SinusoidalOffset(D, H, max_len=8).double()
    learned = Learned(D, H, max_len=8).double()
    with torch.no_grad():
        learned.weight.copy_(sinusoidal_rows(8, D))
    target = torch.randn(2, 4, D, dtype=torch.float64)
    for pe in (offset, learned):
        opt = torch.optim.AdamW(pe.parameters(), lr=0.1, weight_decay=0.0)
        for _ in range(3):
            opt.zero_grad()
            ((pe.embed(x, pos) - target) ** 2).sum().backward()
            opt.step()
    close(table(offset, every), table(learned, every), atol=1e-12)
    assert (table(offset, every) - sinusoidal_rows(8, D)).abs().max() > 0.1  # it did train


def test_hybrid_reference_and_fallback_past_training_length():
    pe = Hybrid(D, H, train_len=10)
    pos = torch.tensor([0.0, 3.0, 9.0, 10.0, 50.0], dtype=torch.float64)
    close(table(pe, pos), [vaswani(p, D) for p in pos.tolist()], atol=1e-6)  # W = [I | 0] at init
    pe = perturbed(pe)
    w, b, e = pe.mix.weight.double(), pe.mix.bias.double(), pe.learned.double()
    for row, p in zip(table(pe, pos), pos.long().tolist(), strict=True):
        learned = e[p].tolist() if p < 10 else [0.0] * D  # zero past the training length
        z = vaswani(p, D) + learned
        close(row, [b[a].item() + sum(w[a, c].item() * z[c] for c in range(2 * D)) for a in range(D)], 1e-5)


def test_learned_lookup_and_clear_error_past_max_len():
    pe = Learned(D, H, max_len=6)
    close(table(pe, torch.tensor([5, 0, 2])), pe.weight.detach()[[5, 0, 2]])
    with pytest.raises(PositionOutOfRange, match="0..5.*6"):
        pe.embed(torch.zeros(1, 7, D), torch.arange(7))


# ------------------------------------------------------------------------------ numbers and codes


def test_integer_single_and_multi_scale():
    close(table(Integer(4, 1, length=11), torch.tensor([0, 5, 10, 30])),
          [[p / 10] * 4 for p in (0, 5, 10, 30)], atol=1e-7)
    pe = Integer(6, 1, length=11, scales=[1.0, 4.0, 8.0])
    pos = torch.tensor([0.0, 10.0, 40.0, 80.0], dtype=torch.float64)
    ref = [[p / (s * 10) for s in (1.0, 1.0, 4.0, 4.0, 8.0, 8.0)] for p in pos.tolist()]  # 3 blocks of 2
    close(table(pe, pos), ref)
    assert table(pe, pos)[-1, -1] == 1.0  # the 8× block reaches 1 at 8·(L − 1)


def test_integer_uneven_blocks_cover_every_scale():
    got = table(Integer(5, 1, length=2, scales=[1.0, 2.0]), torch.tensor([1.0], dtype=torch.float64))
    assert sorted(set(got[0].tolist())) == [0.5, 1.0]


def bits(p: int, n: int, signed: bool) -> list[float]:
    digits = [int(c) for c in reversed(format(p, f"0{n}b"))]  # least significant first
    return [2.0 * d - 1.0 if signed else float(d) for d in digits]


@pytest.mark.parametrize("signed", [True, False])
def test_binary_and_gray_reference(signed):
    pos = torch.tensor([0, 1, 2, 3, 6, 13, 1000, 4095])
    close(table(Binary(16, 2, n_bits=12, signed=signed), pos),
          [bits(p, 12, signed) + [0.0] * 4 for p in pos.tolist()])
    gray = [p ^ (p >> 1) for p in pos.tolist()]
    close(table(GrayCode(16, 2, n_bits=12, signed=signed), pos),
          [bits(g, 12, signed) + [0.0] * 4 for g in gray])


@SETTINGS
@given(st.integers(0, 2**12 - 2))
def test_gray_codes_of_adjacent_positions_differ_in_one_bit(p):
    t = table(GrayCode(16, 2, n_bits=12), torch.tensor([p, p + 1]))
    assert int((t[0] != t[1]).sum()) == 1
    assert int((table(Binary(16, 2, n_bits=12), torch.tensor([p, p + 1])).diff(dim=0) != 0).sum()) >= 1


def test_gray_code_is_a_bijection_and_binary_refuses_to_wrap():
    t = table(GrayCode(8, 2, n_bits=8, signed=False), torch.arange(256))
    assert len({tuple(r.tolist()) for r in t}) == 256
    with pytest.raises(PositionOutOfRange, match="0..255"):
        table(Binary(8, 2, n_bits=8), torch.tensor([256]))
    with pytest.raises(PosencError, match="integer"):
        table(GrayCode(8, 2, n_bits=8), torch.tensor([1.5]))


# ------------------------------------------------------------------------------ Fourier and RBF


def test_complex_exponential_reference_and_shift_is_a_phase():
    freqs = [0.5, 0.013, 2.0]
    pe = ComplexExponential(D, H, frequencies=freqs)
    rows = table(pe, RANDOM_POS)
    ref = [[f(w * p) for w in freqs for f in (math.cos, math.sin)] + [0.0, 0.0] for p in RANDOM_POS.tolist()]
    close(rows, ref, atol=1e-6)  # frequencies are stored as float32 logs
    z = lambda r: torch.complex(r[0:6:2], r[1:6:2])  # noqa: E731  the e^{iωp} factors
    t = table(pe, torch.tensor([3.0, 10.0], dtype=torch.float64))
    shift = torch.exp(1j * 7.0 * pe.frequencies())
    torch.testing.assert_close(z(t[0]) * shift, z(t[1]), atol=1e-9, rtol=0)


def test_random_fourier_reference_seeded_and_distributed():
    pe = RandomFourier(D, H, sigma=0.25, seed=7)
    b = pe.b.tolist()
    ref = [[math.cos(2 * math.pi * p * bj) for bj in b] + [math.sin(2 * math.pi * p * bj) for bj in b]
           for p in RANDOM_POS.tolist()]
    close(table(pe, RANDOM_POS), ref, atol=1e-8)
    assert RandomFourier(D, H, sigma=0.25, seed=7).b.tolist() == b
    assert RandomFourier(D, H, sigma=0.25, seed=8).b.tolist() != b
    big = RandomFourier(4096, 1, sigma=0.25, seed=0).b
    assert abs(big.std().item() - 0.25) < 0.02 and abs(big.mean().item()) < 0.02


@pytest.mark.parametrize("extent", [1.0, 4.0])
def test_gaussian_rbf_reference_and_centres(extent):
    pe = GaussianRBF(D, H, train_len=16, n_centres=4, sigma=3.0, extent=extent)
    centres = [k * extent * 16 / 4 for k in range(4)]
    assert pe.centres.tolist() == centres
    ref = [[math.exp(-((p - c) ** 2) / (2 * 3.0**2)) for c in centres] + [0.0] * 4
           for p in RANDOM_POS.tolist()]
    close(table(pe, RANDOM_POS), ref)


def test_gaussian_rbf_fades_past_training_range_unless_centres_extend():
    inside = GaussianRBF(D, H, train_len=16)
    far = torch.tensor([200.0], dtype=torch.float64)
    assert table(inside, far).abs().max() < 1e-12
    assert table(GaussianRBF(D, H, train_len=16, extent=16.0), far).max() > 0.5


BOUNDED = {
    "Sinusoidal": (lambda: Sinusoidal(D, H), -1.0, 1.0),
    "ComplexExponential": (lambda: ComplexExponential(D, H), -1.0, 1.0),
    "RandomFourier": (lambda: RandomFourier(D, H, sigma=3.0), -1.0, 1.0),
    "GaussianRBF": (lambda: GaussianRBF(D, H, train_len=64, extent=8.0), 0.0, 1.0),
    "Binary": (lambda: Binary(D, H, n_bits=8), -1.0, 1.0),
    "GrayCode": (lambda: GrayCode(D, H, n_bits=8, signed=False), 0.0, 1.0),
}


@pytest.mark.parametrize("name", BOUNDED)
@SETTINGS
@given(st.lists(st.integers(0, 255), min_size=1, max_size=20))
def test_encodings_stay_within_their_claimed_bounds(name, positions):
    make, lo, hi = BOUNDED[name]
    scale = 1 if name in ("Binary", "GrayCode") else 4099  # large positions where unbounded is allowed
    t = table(make(), torch.tensor(positions) * scale)
    assert lo <= t.min().item() and t.max().item() <= hi


# ------------------------------------------------------------------------------ content-dependent


def gated(x: torch.Tensor, pe, rows: list[list[float]]) -> list[list[list[float]]]:
    """x + P ⊙ 2σ(W x + b), one Python float at a time, for tables ``rows`` (T × Dp) at each token."""
    w, b = pe.gate.weight, pe.gate.bias
    out = []
    for n in range(x.shape[0]):
        out.append([])
        for t, row in enumerate(rows):
            z = [b[a].item() + sum(w[a, c].item() * x[n, t, c].item() for c in range(D)) for a in range(D)]
            out[-1].append([x[n, t, a].item() + row[a] * 2.0 / (1.0 + math.exp(-z[a])) for a in range(D)])
    return out


def test_conditional_pe_reference_and_identity_at_init():
    x = torch.randn(2, 5, D, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 40, 41])
    pe = ConditionalPE(D, H).double()
    close(pe.embed(x, pos) - x, [[vaswani(p, D) for p in pos.tolist()]] * 2, atol=1e-6)
    pe = perturbed(pe)
    close(pe.embed(x, pos), gated(x, pe, [vaswani(p, D) for p in pos.tolist()]), atol=1e-6)


def test_conditional_learned_pe_starts_as_learned_and_matches_reference():
    x = torch.randn(2, 5, D, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 8, 9])
    pe = ConditionalLearnedPE(D, H, max_len=10).double()
    close(pe.embed(x, pos) - x, pe.weight.detach()[pos].expand(2, -1, -1), atol=1e-15)  # f = 1 at init
    pe = perturbed(pe)
    rows = pe.weight.detach()[pos].tolist()
    close(pe.embed(x, pos), gated(x, pe, rows), atol=1e-12)
    other = torch.randn(2, 5, D, dtype=torch.float64)
    assert not torch.allclose(pe.embed(x, pos) - x, pe.embed(other, pos) - other)  # content matters


def test_conditional_learned_pe_is_undefined_past_max_len_and_between_positions():
    pe = ConditionalLearnedPE(D, H, max_len=6)
    with pytest.raises(PositionOutOfRange, match="ConditionalLearnedPE defines positions 0..5.*6"):
        pe.embed(torch.zeros(1, 7, D), torch.arange(7))
    with pytest.raises(PosencError, match="integer"):
        pe.embed(torch.zeros(1, 1, D), torch.tensor([0.5]))


def test_existing_specs_and_checkpoint_keys_are_unchanged():
    """Saved configs and checkpoints name these arguments and parameters: the variants added beside
    them must not have renamed anything."""
    assert ConditionalPE(D, H).spec() == {
        "class_path": "posenc.ConditionalPE",
        "init_args": {"base": 10000.0, "integration": "add", "table_dim": None},
    }
    assert set(ConditionalPE(D, H).state_dict()) == {"gate.weight", "gate.bias"}
    assert TrainableSinusoidal(D, H).spec()["init_args"] == {
        "base": 10000.0, "learn_frequencies": True, "integration": "add", "table_dim": None,
    }
    assert set(TrainableSinusoidal(D, H).state_dict()) == {"log_freq_offset", "offset.weight"}


@pytest.mark.parametrize("causal, kernel", [(False, 3), (False, 5), (True, 3), (True, 4)])
def test_conv_pe_reference(causal, kernel):
    pe = perturbed(ConvPE(D, H, kernel_size=kernel, causal=causal).double())
    x = torch.randn(1, 9, D, dtype=torch.float64)
    w, b = pe.conv.weight[:, 0], pe.conv.bias
    left = kernel - 1 if causal else (kernel - 1) // 2
    got = pe.embed(x, torch.arange(9))
    for t in range(9):
        for c in range(D):
            acc = x[0, t, c].item() + b[c].item()
            for j in range(kernel):
                s = t + j - left
                acc += w[c, j].item() * x[0, s, c].item() if 0 <= s < 9 else 0.0
            assert got[0, t, c].item() == pytest.approx(acc, abs=1e-9)


@pytest.mark.parametrize("causal", [True, False])
def test_causal_model_with_conv_pe_stays_causal(causal):
    torch.manual_seed(0)
    m = Transformer(16, 2, 2, perturbed(ConvPE(16, 2, kernel_size=5, causal=causal)), causal=True).eval()
    x = torch.randn(1, 24, 16)
    y = x.clone()
    y[:, 12:] = torch.randn(1, 12, 16)
    leak = (m(x, torch.arange(24))[:, :12] - m(y, torch.arange(24))[:, :12]).abs().max().item()
    assert (leak == 0.0) if causal else (leak > 1e-4)  # the centred kernel sees 2 bases ahead


@pytest.mark.parametrize("cls", [Learned, SinusoidalOffset, ConditionalLearnedPE], ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_every_table_scheme_rejects_a_bad_max_len_with_one_message(cls, bad):
    with pytest.raises(PosencError, match=rf"^{cls.__name__} max_len must be a positive integer, got "):
        cls(D, H, max_len=bad)
    assert cls(D, H, max_len=4.0).max_len == 4


# ------------------------------------------------------------------------------ genome-scale positions
GENOME = [0, 1, 4_096, 100_000, 4_600_000, 4_641_651]  # E. coli K-12 is 4,641,652 bp


def test_sinusoidal_is_exact_to_float32_rounding_at_genome_coordinates():
    """The angles are formed in float64 (``posenc._numerics``); float32 angles miss this by up to 0.15."""
    pe = Sinusoidal(64, 2)
    for dtype in (torch.int64, torch.float32):
        got = pe.table(torch.tensor([GENOME], dtype=dtype))[0].double()  # (T, 64)
        assert pe.table(torch.tensor([GENOME], dtype=dtype)).dtype == torch.float32
        for t, p in enumerate(GENOME):
            want = []
            for i in range(32):
                w = p / 10000.0 ** (2 * i / 64)
                want += [math.sin(w), math.cos(w)]
            torch.testing.assert_close(got[t], torch.tensor(want, dtype=torch.float64), atol=1e-7, rtol=0)


@pytest.mark.parametrize("make", [Sinusoidal, TrainableSinusoidal, ComplexExponential, RandomFourier,
                                  GaussianRBF, ConditionalPE],
                         ids=lambda m: m.__name__)
def test_absolute_functions_of_position_keep_float64_angles_for_float32_outputs(make):
    """Each scheme's float32 table at genome coordinates equals its float64 table to float32 rounding."""
    torch.manual_seed(0)
    pe = perturbed(make(64, 2))
    pos = torch.tensor([GENOME])
    lo = pe.table(pos).double()  # (1, T, 64), from int64 positions
    hi = pe.table(pos.double())  # (1, T, 64), the float64 reference path
    torch.testing.assert_close(lo, hi, atol=2e-6 * max(1.0, hi.abs().max().item()), rtol=0)
