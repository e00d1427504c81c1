"""The relative / attention-bias catalogue against float64 loop references written from the papers.

Each reference loops over (b, h, i, j) with Python floats, independently of the module's vectorised
code, and reads only the module's parameters. Positions cover contiguous, shifted, non-contiguous
(spanning T5's log buckets and the clipping distances) and per-row (B, T) cases.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import (
    FIRE,
    DeBERTa,
    DynamicBias,
    GaussianPrior,
    Kerple,
    PosencError,
    ShawRelative,
    T5Bias,
    TransformerXL,
    t5_relative_bucket,
)
from posenc.nn import Attention, Transformer

D, H, B = 8, 2, 2
DH = D // H
POSITIONS = {
    "contiguous": torch.arange(7),
    "shifted": torch.arange(7) + 1000,
    "sparse": torch.tensor([0, 1, 5, 9, 40, 130, 300]),
    "batched": torch.tensor([[3, 4, 6, 7, 20, 21, 90], [0, 2, 3, 50, 51, 52, 400]]),
}
SETTINGS = settings(max_examples=25, deadline=None)
f64 = lambda t: t.detach().double()  # noqa: E731


def perturbed(pe: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """``pe`` in eval mode with every parameter moved randomly (so no init value is special)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return pe.eval()


def qk(t: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, B, H, t, DH, generator=g)
    return q, k


def rows(pos: torch.Tensor) -> list[list[int]]:
    """Positions as B Python lists."""
    return pos.expand(B, pos.shape[-1]).tolist()


def loop(pos: torch.Tensor, fn) -> torch.Tensor:
    """out[b, h, i, j] = fn(b, h, i, j, p_i, p_j) in float64."""
    out = torch.zeros(B, H, pos.shape[-1], pos.shape[-1], dtype=torch.float64)
    for b, row in enumerate(rows(pos)):
        for h in range(H):
            for i, pi in enumerate(row):
                for j, pj in enumerate(row):
                    out[b, h, i, j] = fn(b, h, i, j, pi, pj)
    return out


def check(module_out: torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(module_out.double().expand_as(ref), ref, rtol=1e-4, atol=1e-5)


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def ref_t5_bucket(rel: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True):
    """Mesh-TF's _relative_position_bucket, transcribed: n = query − key."""
    n, ret = -rel, 0
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    log_fraction = math.log(n / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + int(log_fraction * (num_buckets - max_exact))
    return ret + min(large, num_buckets - 1)


def ref_mlp(layers: list, x: list[float]) -> list[float]:
    """A float64 MLP from (weight, bias, kind) triples: kind ∈ {"linear", "ln", "relu"}."""
    for w, b, kind in layers:
        if kind == "linear":
            x = [sum(w[o][i] * x[i] for i in range(len(x))) + b[o] for o in range(len(b))]
        elif kind == "ln":
            mean = sum(x) / len(x)
            var = sum((v - mean) ** 2 for v in x) / len(x)
            x = [(v - mean) / math.sqrt(var + 1e-5) * w[n] + b[n] for n, v in enumerate(x)]
        else:
            x = [max(v, 0.0) for v in x]
    return x


def mlp_layers(seq: torch.nn.Sequential) -> list:
    kinds = {torch.nn.Linear: "linear", torch.nn.LayerNorm: "ln", torch.nn.ReLU: "relu"}
    out = []
    for m in seq:
        kind = kinds[type(m)]
        w = f64(m.weight).tolist() if kind != "relu" else None
        b = f64(m.bias).tolist() if kind != "relu" else None
        out.append((w, b, kind))
    return out


# --------------------------------------------------------------------------- paper numbers
@pytest.mark.parametrize(
    "rel, bucket",
    [
        # rel = key − query. Same position: exact bucket 0. Key one step *before* the query
        # (T5's n = query − key = 1 > 0): lower half, exact bucket 1; one step *after*: 16 + 1.
        (0, 0), (-1, 1), (1, 17),
        (-7, 7), (7, 23),  # last exact distance (max_exact = 32 / 4 = 8)
        (-8, 8),  # first log bucket: 8 + ⌊log(8/8)/log(128/8)·8⌋ = 8
        (-12, 9),  # 8 + ⌊log 1.5 / log 16 · 8⌋ = 8 + ⌊1.17⌋
        (-16, 10), (-64, 14),  # 8 + ⌊(1/4)·8⌋, 8 + ⌊(3/4)·8⌋
        (-127, 15), (-128, 15), (-5000, 15),  # ⌊7.98⌋ → 15; 16 is clipped to the last bucket
        (20, 26), (5000, 31),  # 16 + 8 + ⌊log 2.5 / log 16 · 8⌋ = 24 + ⌊2.64⌋; far → last bucket
    ],
)
def test_t5_bucket_hand_computed(rel, bucket):
    assert t5_relative_bucket(torch.tensor([rel])).item() == bucket == ref_t5_bucket(rel)


def test_t5_bucket_matches_reference_everywhere():
    rel = torch.arange(-3000, 3001)
    for kw in ({}, {"bidirectional": False}, {"num_buckets": 8, "max_distance": 20}):
        got = t5_relative_bucket(rel, **kw).tolist()
        assert got == [ref_t5_bucket(r, **kw) for r in rel.tolist()], kw
    # One-way: keys after the query share bucket 0; distances 0..15 exact, then log-spaced to 31.
    assert t5_relative_bucket(torch.tensor([5, -1, -16, -32, -128]), bidirectional=False).tolist() == [
        0, 1, 16, 21, 31,
    ]


# --------------------------------------------------------------------------- float64 references
@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
def test_t5(pos):
    pe = perturbed(T5Bias(D, H))
    table = f64(pe.table)
    ref = loop(pos, lambda b, h, i, j, pi, pj: table[ref_t5_bucket(pj - pi), h])
    check(pe.bias(*qk(pos.shape[-1])[:1], pos, pos), ref)


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
def test_shaw_bias_and_value_term(pos):
    kmax = 2
    pe = perturbed(ShawRelative(D, H, max_relative=kmax))
    q, _ = qk(pos.shape[-1])
    a_k, a_v, qd = f64(pe.rel_key), f64(pe.rel_value), f64(q)
    idx = lambda pi, pj: max(-kmax, min(kmax, pj - pi)) + kmax  # noqa: E731
    ref = loop(pos, lambda b, h, i, j, pi, pj: float(qd[b, h, i] @ a_k[idx(pi, pj)]) / math.sqrt(DH))
    check(pe.bias(q, pos, pos), ref)
    w = torch.rand(B, H, pos.shape[-1], pos.shape[-1]).softmax(-1)
    a_v_ij = a_v[loop(pos, lambda b, h, i, j, pi, pj: idx(pi, pj)).long()]  # (B, H, T, T, Dh) on purpose
    check(pe.value_term(w, pos, pos), torch.einsum("bhij,bhijd->bhid", f64(w), a_v_ij))  # Σ_j w_ij a^V_ij


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
def test_deberta(pos):
    kmax = 3
    pe = perturbed(DeBERTa(D, H, max_relative=kmax))
    q, k = qk(pos.shape[-1])
    q_r = f64(pe.rel_embed) @ f64(pe.query_proj.weight).T  # (2k, D): P·W_q^r
    k_r = f64(pe.rel_embed) @ f64(pe.key_proj.weight).T
    delta = lambda a, c: max(0, min(2 * kmax - 1, a - c + kmax))  # noqa: E731  δ(a, c) of positions
    sl = lambda h: slice(h * DH, (h + 1) * DH)  # noqa: E731

    def term(b, h, i, j, pi, pj):
        c2p = float(f64(q[b, h, i]) @ k_r[delta(pi, pj), sl(h)])
        p2c = float(f64(k[b, h, j]) @ q_r[delta(pj, pi), sl(h)])
        return (c2p + p2c) / math.sqrt(DH)

    ref = loop(pos, term)
    check(pe.bias(q, pos, pos, k=k), ref)
    # Same relative weighting as the paper's softmax((c2c + c2p + p2c)/√(3·Dh)), √3 larger overall.
    c2c = f64(q) @ f64(k).transpose(-1, -2)
    paper = (c2c + ref * math.sqrt(DH)) / math.sqrt(3 * DH)
    check(c2c / math.sqrt(DH) + pe.bias(q, pos, pos, k=k).double(), math.sqrt(3) * paper)


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
def test_transformer_xl(pos):
    pe = perturbed(TransformerXL(D, H))
    q, k = qk(pos.shape[-1])
    w, u, v = f64(pe.rel_proj.weight), f64(pe.u), f64(pe.v)

    def r(dist: int) -> torch.Tensor:  # R_{i−j} (interleaved sin, cos), then W_{k,R}
        ang = [dist / 10000.0 ** (2 * m / D) for m in range(D // 2)]
        table = torch.tensor([f(a) for a in ang for f in (math.sin, math.cos)], dtype=torch.float64)
        return w @ table

    def term(b, h, i, j, pi, pj):
        rij = r(pi - pj)[h * DH:(h + 1) * DH]
        qi, kj = f64(q[b, h, i]), f64(k[b, h, j])
        return float(qi @ rij + u[h] @ kj + v[h] @ rij) / math.sqrt(DH)  # terms (b) + (c) + (d)

    check(pe.bias(q, pos, pos, k=k), loop(pos, term))


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
@pytest.mark.parametrize("learn_mu", [False, True])
def test_gaussian_prior(pos, learn_mu):
    pe = perturbed(GaussianPrior(D, H, mu=[1.0, 4.0], learn_mu=learn_mu))
    sig = [softplus(x) for x in pe.raw_sigma.tolist()]
    mu = [softplus(x) for x in pe.raw_mu.tolist()] if learn_mu else [1.0, 4.0]
    ref = loop(pos, lambda b, h, i, j, pi, pj: -((abs(pi - pj) - mu[h]) ** 2) / (2 * sig[h] ** 2))
    check(pe.bias(qk(7)[0], pos, pos), ref)


def test_gaussian_prior_default_widths_are_geometric():
    pe = GaussianPrior(D, 4)
    torch.testing.assert_close(pe.sigma, torch.tensor([2.0, 6.3496, 20.1587, 64.0]), rtol=1e-4, atol=0)


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple(pos, variant):
    pe = perturbed(Kerple(D, H, variant=variant, r1_init=[0.5, 2.0], r2_init=[0.3, 1.5]))
    r1 = [softplus(x) for x in pe.raw_r1.tolist()]
    r2 = [2 / (1 + math.exp(-x)) if variant == "power" else softplus(x) for x in pe.raw_r2.tolist()]
    if variant == "log":
        fn = lambda b, h, i, j, pi, pj: -r1[h] * math.log(1 + r2[h] * abs(pi - pj))  # noqa: E731
    else:
        fn = lambda b, h, i, j, pi, pj: -r1[h] * abs(pi - pj) ** r2[h]  # noqa: E731
    check(pe.bias(qk(7)[0], pos, pos), loop(pos, fn))


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
def test_fire(pos):
    pe = perturbed(FIRE(D, H, threshold_init=20.0))
    c, big_l, layers = softplus(pe.raw_c.item()), softplus(pe.raw_threshold.item()), mlp_layers(pe.mlp)
    psi = lambda x: math.log(c * x + 1)  # noqa: E731

    def term(b, h, i, j, pi, pj):
        return ref_mlp(layers, [psi(abs(pi - pj)) / psi(max(big_l, pi, pj))])[h]

    check(pe.bias(qk(7)[0], pos, pos), loop(pos, term))
    # On the causal triangle it is the paper's f(ψ(i − j) / ψ(max(L, i))).
    out, row = pe.bias(qk(7)[0], pos, pos).expand(B, H, 7, 7), rows(pos)[0]
    for i, pi in enumerate(row):
        for j, pj in enumerate(row[: i + 1]):
            paper = ref_mlp(layers, [psi(pi - pj) / psi(max(big_l, pi))])
            check(out[0, :, i, j], torch.tensor(paper, dtype=torch.float64))


@pytest.mark.parametrize("pos", POSITIONS.values(), ids=POSITIONS.keys())
@pytest.mark.parametrize("log_scale", [False, True])
def test_dynamic_bias(pos, log_scale):
    pe = perturbed(DynamicBias(D, H, hidden=6, log_scale=log_scale))
    layers = mlp_layers(pe.mlp)
    feat = lambda d: math.copysign(math.log1p(abs(d)), d) if log_scale else float(d)  # noqa: E731
    ref = loop(pos, lambda b, h, i, j, pi, pj: ref_mlp(layers, [feat(pj - pi)])[h])
    check(pe.bias(qk(7)[0], pos, pos), ref)


def test_dynamic_bias_runs_its_mlp_on_unique_distances_only():
    pe, seen = DynamicBias(D, H), []
    pe.mlp.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    pe.bias(qk(50)[0], torch.arange(50), torch.arange(50))
    assert seen == [2 * 50 - 1]


# --------------------------------------------------------------------------- properties
POSITION_LISTS = st.lists(st.integers(0, 400), min_size=2, max_size=8, unique=True).map(sorted)
SHIFT_INVARIANT = {  # factories (d_model, n_heads) → scheme
    "T5Bias": lambda d, h: T5Bias(d, h),
    "ShawRelative": lambda d, h: ShawRelative(d, h, max_relative=3),
    "DeBERTa": lambda d, h: DeBERTa(d, h, max_relative=3),
    "TransformerXL": lambda d, h: TransformerXL(d, h),
    "GaussianPrior": lambda d, h: GaussianPrior(d, h),
    "KerpleLog": lambda d, h: Kerple(d, h),
    "KerplePower": lambda d, h: Kerple(d, h, variant="power"),
    "DynamicBias": lambda d, h: DynamicBias(d, h),
}


@pytest.mark.parametrize("make", SHIFT_INVARIANT.values(), ids=SHIFT_INVARIANT.keys())
@SETTINGS
@given(positions=POSITION_LISTS, shift=st.integers(-10_000, 100_000))
def test_logits_invariant_to_shifting_positions(make, positions, shift):
    torch.manual_seed(0)
    pe = perturbed(make(D, H))
    pos = torch.tensor(positions)
    q, k = qk(len(positions))
    torch.testing.assert_close(pe.bias(q, pos + shift, pos + shift, k=k), pe.bias(q, pos, pos, k=k))


@SETTINGS
@given(positions=st.lists(st.integers(0, 60), min_size=2, max_size=8, unique=True).map(sorted),
       shift=st.integers(0, 100))
def test_fire_is_relative_below_its_threshold_and_symmetric(positions, shift):
    """FIRE normalises by max(L, i, j): shift-invariant only while every position stays below L."""
    torch.manual_seed(0)
    pe = perturbed(FIRE(D, H, threshold_init=500.0))
    pos, q = torch.tensor(positions), qk(len(positions))[0]
    out = pe.bias(q, pos, pos)
    torch.testing.assert_close(pe.bias(q, pos + shift, pos + shift), out)
    torch.testing.assert_close(out, out.transpose(-1, -2))  # |i − j| and max(i, j) are symmetric


def test_fire_is_not_shift_invariant_past_its_threshold():
    torch.manual_seed(0)
    pe = perturbed(FIRE(D, H, threshold_init=2.0))
    pos, q = torch.arange(6), qk(6)[0]
    assert not torch.allclose(pe.bias(q, pos + 1000, pos + 1000), pe.bias(q, pos, pos))


@SETTINGS
@given(mu=st.lists(st.integers(1, 12), min_size=H, max_size=H),
       sigmas=st.lists(st.floats(0.5, 50.0), min_size=H, max_size=H))
def test_gaussian_prior_is_nonpositive_and_peaks_at_mu(mu, sigmas):
    pe = GaussianPrior(D, H, sigmas=sigmas, mu=[float(m) for m in mu], learn_mu=True)
    out = pe.bias(qk(1)[0], torch.tensor([30]), torch.arange(61))[0, :, 0]  # (H, 61): distances −30..30
    assert (out <= 0).all()
    for h in range(H):
        peaks = (torch.arange(61) - 30).abs() == mu[h]
        assert out[h][peaks].abs().max() < 1e-4 and (out[h][~peaks] < out[h][peaks].min()).all()


@SETTINGS
@given(variant=st.sampled_from(["log", "power"]),
       r1=st.floats(0.01, 10.0), r2=st.floats(0.01, 1.99))
def test_kerple_non_increasing_in_distance(variant, r1, r2):
    pe = Kerple(D, H, variant=variant, r1_init=r1, r2_init=r2)
    out = pe.bias(qk(1)[0], torch.tensor([0]), torch.arange(300))[0, :, 0]  # (H, 300)
    assert (out.diff(dim=-1) <= 1e-6).all() and out[:, 0].abs().max() == 0
    mirrored = pe.bias(qk(1)[0], torch.tensor([299]), torch.arange(300))[0, :, 0]
    torch.testing.assert_close(mirrored, out.flip(-1))


@SETTINGS
@given(kmax=st.integers(1, 5), beyond=st.integers(1, 200))
def test_shaw_constant_beyond_clipping(kmax, beyond):
    torch.manual_seed(0)
    pe = perturbed(ShawRelative(D, H, max_relative=kmax))
    q, pos = qk(1)[0], torch.tensor([1000])
    keys = torch.tensor([1000 + kmax, 1000 + kmax + beyond, 1000 - kmax, 1000 - kmax - beyond])
    out = pe.bias(q, pos, keys)  # (B, H, 1, 4)
    torch.testing.assert_close(out[..., 1], out[..., 0])
    torch.testing.assert_close(out[..., 3], out[..., 2])
    w = torch.tensor([0.0, 1.0, 0.0, 0.0]).expand(B, H, 1, 4)  # all weight on a far key
    torch.testing.assert_close(pe.value_term(w, pos, keys)[0, 0, 0], pe.rel_value[2 * kmax])


# --------------------------------------------------------------------------- integration
def test_shaw_inside_attention_matches_the_paper():
    """Attention's explicit path with Shaw = softmax(q·(k + a^K)/√Dh)·(v + a^V), in float64."""
    torch.manual_seed(0)
    pe = perturbed(ShawRelative(D, H, max_relative=2))
    attn = Attention(D, H, pe).eval()
    x, pos = torch.randn(B, 6, D), torch.tensor([0, 1, 2, 5, 9, 10])
    out = attn(x, pos)
    q, k, v = f64(attn.qkv(x)).view(B, 6, 3, H, DH).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
    idx = (pos[None, :] - pos[:, None]).clamp(-2, 2) + 2  # (T, T)
    a_k, a_v = f64(pe.rel_key)[idx], f64(pe.rel_value)[idx]  # (T, T, Dh), materialised on purpose
    e = (q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, a_k)) / math.sqrt(DH)
    w = e.softmax(-1)
    z = w @ v + torch.einsum("bhij,ijd->bhid", w, a_v)  # (B, H, T, Dh)
    ref = z.transpose(1, 2).reshape(B, 6, D) @ f64(attn.out.weight).T + f64(attn.out.bias)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)


END_TO_END = {**SHIFT_INVARIANT, "FIRE": lambda d, h: FIRE(d, h)}


@pytest.mark.parametrize("make", END_TO_END.values(), ids=END_TO_END.keys())
@pytest.mark.parametrize("causal", [False, True])
def test_end_to_end_transformer(make, causal):
    torch.manual_seed(0)
    d, h, t = 16, 2, 32
    pe = make(d, h)
    model = Transformer(d, h, 2, pe, causal=causal)
    pos = torch.arange(t).expand(3, t) + torch.tensor([[0], [5], [100]])  # (B, T), per-row offsets
    out = model(torch.randn(3, t, d), pos, key_padding_mask=torch.arange(t).expand(3, t) >= 30)
    assert out.shape == (3, t, d) and torch.isfinite(out).all()
    out.pow(2).sum().backward()
    for name, p in pe.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    if isinstance(pe, ShawRelative):
        assert pe.meta.attention_path == "explicit" and pe.rel_value.grad.abs().sum() > 0


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: T5Bias(D, H, num_buckets=3), "3"),
        (lambda: T5Bias(D, H, max_distance=8), "8"),
        (lambda: ShawRelative(D, H, max_relative=0), "0"),
        (lambda: DeBERTa(D, H, max_relative=2.5), "2.5"),
        (lambda: TransformerXL(9, 3), "9"),
        (lambda: GaussianPrior(D, H, sigmas=[1.0]), r"\[1.0\]"),
        (lambda: GaussianPrior(D, H, sigmas=[1.0, -2.0]), "-2.0"),
        (lambda: GaussianPrior(D, H, learn_mu=True), "0.0"),
        (lambda: Kerple(D, H, variant="cubic"), "cubic"),
        (lambda: Kerple(D, H, variant="power", r2_init=2.5), "2.5"),
        (lambda: FIRE(D, H, c_init=0.0), "0.0"),
        (lambda: DynamicBias(D, H, hidden=0), "0"),
    ],
)
def test_bad_arguments_name_the_value(build, match):
    with pytest.raises(PosencError, match=match):
        build()


@pytest.mark.parametrize("cls", [DeBERTa, TransformerXL])
def test_content_biases_need_keys(cls):
    with pytest.raises(PosencError, match="needs the keys"):
        cls(D, H).bias(qk(4)[0], torch.arange(4), torch.arange(4))


def test_fire_mlp_is_the_authors_one_hidden_layer_and_old_checkpoints_name_the_fix():
    """Li et al. (2023)'s listing: Linear(1, 32), ReLU, Linear(32, H). Two-layer checkpoints from
    before issue 41 load into ``n_hidden=2`` and fail with a message naming it otherwise."""
    pe = FIRE(D, H)
    assert [type(m).__name__ for m in pe.mlp] == ["Linear", "ReLU", "Linear"]
    assert (pe.mlp[0].in_features, pe.mlp[0].out_features, pe.mlp[2].out_features) == (1, 32, H)
    old = FIRE(D, H, n_hidden=2).state_dict()
    with pytest.raises(PosencError, match="n_hidden=2"):
        FIRE(D, H).load_state_dict(old)
    FIRE(D, H, n_hidden=2).load_state_dict(old)
