"""The ``clipped`` path (Shaw's far keys through the flash kernel, the band explicit) against the dense
float64 reference and the explicit path, and when it is chosen."""

from __future__ import annotations

import math

import pytest
import torch

import posenc.nn.attention as attention
from posenc import Compose, SchemeMeta, ShawRelative
from posenc.nn.attention import AttentionCall, AttentionSettings, choose_path, route
from posenc.nn.clipped import clipped_attention
from posenc.nn.transformer import Transformer
from tests.helpers import D, H, reference_attention, scheme

M = 16  # configs/posenc/shaw_relative.yaml's max_relative, the one scheme() builds


def dense_clipped(q, k, v, m, rel_key, rel_value, causal):
    """Shaw's formula written out over all (i, j) pairs: (B, H, T, T, Dh) relative vectors."""
    T, Dh = q.shape[-2:]
    idx = torch.arange(T)
    bucket = (idx[None, :] - idx[:, None]).clamp(-m, m) + m  # (T, T): clip(j − i) + m
    a_k, a_v = rel_key[bucket], rel_value[bucket]  # (T, T, Dh)
    scores = (q[..., :, None, :] * (k[..., None, :, :] + a_k)).sum(-1) / math.sqrt(Dh)  # (B, H, T, T)
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    w = scores.softmax(-1)
    return w @ v + (w[..., None] * a_v).sum(-2)  # (B, H, T, Dh)


def inputs(T, m, Dh=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, T, Dh, generator=g, dtype=torch.float64) for _ in range(3))
    tables = (torch.randn(2 * m + 1, Dh, generator=g, dtype=torch.float64) for _ in range(2))
    return (q, k, v, *tables)


@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("T,m", [(3, 1), (5, 2), (8, 3)])
def test_kernel_matches_written_out_formula_and_gradcheck(T, m, causal):
    """Forward against Shaw's formula over all pairs; gradients of q, k, v, a^K, a^V by finite differences."""
    q, k, v, rk, rv = inputs(T, m)
    got = clipped_attention(q, k, v, m, rk, rv, causal)
    torch.testing.assert_close(got, dense_clipped(q, k, v, m, rk, rv, causal), rtol=1e-10, atol=1e-12)
    args = [t.clone().requires_grad_() for t in (q, k, v, rk, rv)]
    assert torch.autograd.gradcheck(lambda a, b, c, d, e: clipped_attention(a, b, c, m, d, e, causal), args)


def model(pe, causal, **kw):
    torch.manual_seed(0)
    return Transformer(D, H, 2, pe, causal=causal, **kw).double()


def paths_taken(monkeypatch):
    """The list that collects every path :func:`route` chooses from now on."""
    seen, real = [], attention.route
    monkeypatch.setattr(attention, "route", lambda *a: seen.append(real(*a)) or seen[-1])
    return seen


@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("T", [2 * M + 1, 2 * M + 2, 50, 2 * M, 20])
def test_model_matches_dense_reference_and_explicit_gradients(T, causal, monkeypatch):
    """A Shaw layer against the dense float64 reference; the whole model's gradients (input, q/k/v
    projections, a^K, a^V) against the explicit path. T ≤ 2m falls back to the explicit path."""
    pe = scheme(ShawRelative).double()
    g = torch.Generator().manual_seed(T)
    x = torch.randn(2, T, D, generator=g, dtype=torch.float64)
    pos = torch.arange(T) + 7
    seen = paths_taken(monkeypatch)
    fast = model(pe, causal).train()
    slow = model(pe, causal, settings=AttentionSettings(clipped=False)).train()
    attn = fast.blocks[0].attn
    ref = reference_attention(attn, x, pos, pe, None, causal)
    torch.testing.assert_close(attn(x, pos), ref, rtol=1e-9, atol=1e-10)
    grads = []
    for m in (fast, slow):
        pe.zero_grad()
        xi = x.clone().requires_grad_()
        (m(xi, pos) ** 2).sum().backward()
        grads.append([xi.grad, *(p.grad.clone() for p in (*pe.parameters(), *m.parameters()))])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    assert set(seen) == ({"clipped", "explicit"} if T > 2 * M else {"explicit"})


def test_chosen_only_where_allowed(monkeypatch):
    """Key padding, attention dropout, irregular positions, T ≤ 2m and CUDA take the explicit paths."""
    pe = scheme(ShawRelative)
    T = 40

    def path(pos=None, kpm=None, drop=0.0, length=T, device="cpu", **settings):
        ctx = AttentionCall(torch.arange(length) if pos is None else pos, pe, kpm, False, drop,
                            AttentionSettings(**settings))
        return route(ctx, length, torch.device(device))

    assert path() == "clipped"
    assert path(pos=torch.arange(T)[None].repeat(2, 1) + torch.tensor([[0], [9]])) == "clipped"
    assert path(kpm=torch.zeros(2, T, dtype=torch.bool)) == "explicit"
    assert path(drop=0.1) == "explicit"
    assert path(pos=torch.arange(T) * 2) == "explicit"  # distances are not j − i
    assert path(pos=torch.arange(T).double() * 0.5) == "explicit"
    assert path(length=2 * M) == "explicit"
    assert path(clipped=False) == "explicit"
    assert path(length=5000) == "clipped"  # no query blocks needed: memory is linear in T
    meta = ShawRelative.meta
    assert choose_path(meta, T, torch.device("cuda"), AttentionSettings()) == "explicit"
    plain = SchemeMeta(acts_on=("bias",), content_bias=True, value_term=True)  # a value term, not Shaw's
    assert choose_path(plain, T, torch.device("cpu"), AttentionSettings()) == "explicit"
    both = Compose(D, H, schemes=[{"class_path": "posenc.ALiBi"}, {"class_path": "posenc.ShawRelative"}])
    assert both.meta.value_term and not both.meta.clipped_relative  # ALiBi's bias must not be dropped
    assert route(AttentionCall(torch.arange(T), both), T, torch.device("cpu")) == "explicit"


def test_float32_and_bf16_autocast_track_float64():
    """The merge runs in float32 (bf16 autocast too), so low precision stays close to float64."""
    pe = scheme(ShawRelative)
    m = Transformer(D, H, 2, pe).eval()
    x, pos = torch.randn(2, 80, D), torch.arange(80)
    ref = Transformer(D, H, 2, pe, settings=AttentionSettings(clipped=False)).eval()
    ref.load_state_dict(m.state_dict())
    with torch.no_grad():
        want = ref(x, pos)
        torch.testing.assert_close(m(x, pos), want, rtol=1e-4, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = m(x, pos)
    assert torch.isfinite(low).all() and (low.float() - want).abs().mean() < 0.05


def test_gradients_under_bf16_autocast_track_float32():
    """Training under bf16 autocast: the tables' gradients stay finite and close to float32's."""
    pe = scheme(ShawRelative)
    m = Transformer(D, H, 2, pe).train()
    x, pos = torch.randn(2, 80, D), torch.arange(80)
    grads = []
    for low in (False, True):
        pe.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            m(x, pos).float().square().mean().backward()
        grads.append([p.grad.clone() for p in pe.parameters()])
    for ref, got in zip(*grads, strict=True):
        assert torch.isfinite(got).all()
        assert (got - ref).norm() < 0.1 * ref.norm()  # bf16 rounding, not a lost or misplaced term
