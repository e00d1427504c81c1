"""Compose: children applied in order, metadata combined per instance, specs that round-trip."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import (
    Compose,
    GaussianPrior,
    PosencError,
    PositionOutOfRange,
    RoPE,
    SchemeMeta,
    all_schemes,
    build_encoding,
)
from posenc.compose import COMPOSE_CLASS_META, combine_meta
from posenc.nn import Attention, Transformer

ROOT = Path(__file__).resolve().parents[2]
D, H, B, T = 16, 2, 3, 10
ROPE = {"class_path": "posenc.RoPE"}
GAUSS = {"class_path": "posenc.GaussianPrior", "init_args": {"sigmas": [1.5, 9.0]}}
SHAW = {"class_path": "posenc.ShawRelative", "init_args": {"max_relative": 3}}
LEARNED = {"class_path": "posenc.Learned", "init_args": {"max_len": 40}}
SINUSOIDAL = {"class_path": "posenc.Sinusoidal"}


def noisy(pe: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return pe.eval()


def tensors(t: int = T, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, t, D, generator=g)
    q, k = torch.randn(2, B, H, t, D // H, generator=g)
    return x, q, k


def test_rope_gaussian_equals_both_applied_by_hand():
    pe = noisy(Compose(D, H, schemes=[ROPE, GAUSS]))
    rope, gauss = RoPE(D, H), GaussianPrior(D, H, sigmas=[1.5, 9.0])
    gauss.load_state_dict(pe.schemes[1].state_dict())
    x, q, k = tensors()
    pos = torch.tensor([[0, 1, 2, 4, 8, 9, 10, 30, 31, 32]]).expand(B, T) + torch.tensor([[0], [3], [500]])
    torch.testing.assert_close(pe.embed(x, pos), x)
    q_rot, k_rot = rope.rotate(q, k, pos, pos)
    torch.testing.assert_close(pe.rotate(q, k, pos, pos), (q_rot, k_rot))
    torch.testing.assert_close(pe.bias(q_rot, pos, pos, k=k_rot), gauss.bias(q_rot, pos, pos))
    # …and inside the attention: SDPA over rotated q, k with the Gaussian bias as the mask.
    attn = Attention(D, H, pe).eval()
    q0, k0, v0 = attn.qkv(x).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
    q1, k1 = rope.rotate(q0, k0, pos, pos)
    y = F.scaled_dot_product_attention(q1, k1, v0, attn_mask=gauss.bias(q1, pos, pos))  # (B, H, T, Dh)
    torch.testing.assert_close(attn(x, pos), attn.out(y.transpose(1, 2).reshape(B, T, D)))


def test_instance_meta_combines_children_and_class_meta_stays_valid():
    pe = Compose(D, H, schemes=[ROPE, GAUSS])
    assert pe.meta == SchemeMeta(acts_on=("rotate", "bias"), extrapolates=True, quadratic_memory=True,
                                 translation_invariant=True)  # the Gaussian's bias is a function of j − i
    assert pe.meta.attention_path == "sdpa+toeplitz"
    assert isinstance(type(pe).meta, SchemeMeta) and type(pe).meta == COMPOSE_CLASS_META
    assert Compose.meta.acts_on == ("input", "conv", "rotate", "bias") and not Compose.meta.extrapolates
    assert Compose(D, H, schemes=[ROPE]).meta == RoPE.meta
    assert Compose in all_schemes()


def test_combine_meta_rules():
    shift = SchemeMeta(acts_on=("bias",), translation_invariant=True)
    rotate = SchemeMeta(acts_on=("rotate",))
    assert combine_meta([shift, rotate]).translation_invariant  # only the biasing children count
    assert not combine_meta([shift, SchemeMeta(acts_on=("bias",))]).translation_invariant
    assert not combine_meta([rotate]).translation_invariant  # no bias at all
    a = SchemeMeta(acts_on=("bias",), quadratic_memory=True)
    b = SchemeMeta(acts_on=("input",), extrapolates=False, content_bias=True, value_term=True)
    assert combine_meta([a, b]) == SchemeMeta(
        acts_on=("input", "bias"),
        extrapolates=False,
        quadratic_memory=True,
        content_bias=True,
        value_term=True,
    )


def test_value_terms_are_summed_and_select_the_explicit_path():
    pe = noisy(Compose(D, H, schemes=[SHAW, GAUSS, SHAW]))
    assert pe.meta.value_term and pe.meta.content_bias and pe.meta.attention_path == "explicit"
    _, q, k = tensors()
    pos, w = torch.arange(T), torch.rand(B, H, T, T).softmax(-1)
    s1, g, s2 = pe.schemes
    both = s1.value_term(w, pos, pos) + s2.value_term(w, pos, pos)
    torch.testing.assert_close(pe.value_term(w, pos, pos), both)
    total = s1.bias(q, pos, pos) + g.bias(q, pos, pos) + s2.bias(q, pos, pos)
    torch.testing.assert_close(pe.bias(q, pos, pos, k=k), total)
    model = Transformer(D, H, 2, pe)
    model(torch.randn(B, T, D), pos).sum().backward()
    assert s1.rel_value.grad.abs().sum() > 0 and s2.rel_value.grad.abs().sum() > 0


def test_embeddings_in_order_no_bias_and_max_len():
    pe = noisy(Compose(D, H, schemes=[SINUSOIDAL, LEARNED, ROPE]))
    x, q, k = tensors()
    pos = torch.arange(T)
    torch.testing.assert_close(pe.embed(x, pos), pe.schemes[1].embed(pe.schemes[0].embed(x, pos), pos))
    assert pe.bias(q, pos, pos, k=k) is None
    assert pe.max_len == 40 and not pe.meta.extrapolates
    with pytest.raises(PositionOutOfRange):
        pe.embed(tensors(50)[0], torch.arange(50))
    assert Compose(D, H, schemes=[ROPE, GAUSS]).max_len is None


def test_spec_round_trips_and_is_yaml():
    nested = {"class_path": "posenc.Compose", "init_args": {"schemes": [SHAW]}}
    pe = noisy(Compose(D, H, schemes=[ROPE, GAUSS, nested]))
    spec = pe.spec()
    assert spec["class_path"] == "posenc.Compose"
    children = [s["class_path"] for s in spec["init_args"]["schemes"]]
    assert children == ["posenc.RoPE", "posenc.GaussianPrior", "posenc.Compose"]
    assert yaml.safe_load(yaml.safe_dump(spec)) == spec
    other = build_encoding(spec, D, H).eval()
    assert other.spec() == spec and other.meta == pe.meta
    other.load_state_dict(pe.state_dict())
    _, q, k = tensors()
    pos = torch.arange(T) + 7
    torch.testing.assert_close(other.rotate(q, k, pos, pos), pe.rotate(q, k, pos, pos))
    torch.testing.assert_close(other.bias(q, pos, pos, k=k), pe.bias(q, pos, pos, k=k))


def test_rope_gaussian_config_builds_the_composition():
    cfg = yaml.safe_load((ROOT / "configs" / "posenc" / "rope_gaussian.yaml").read_text())
    pe = build_encoding(cfg["model"]["init_args"]["pe"], D, H)
    assert [type(c) for c in pe.schemes] == [RoPE, GaussianPrior]
    model = Transformer(D, H, 2, pe, causal=True)
    out = model(torch.randn(2, 32, D), torch.arange(32))
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert pe.schemes[1].raw_sigma.grad is not None


@pytest.mark.parametrize(
    "schemes, match",
    [
        ([], r"\[\]"),
        ("posenc.RoPE", "posenc.RoPE"),
        ([{"class_path": "posenc.Nope"}], "posenc.Nope"),
        ([{"class_path": "posenc.RoPE", "init_args": {"base": 0.5}}], "0.5"),
    ],
)
def test_bad_children_raise_posenc_errors(schemes, match):
    with pytest.raises(PosencError, match=match):
        Compose(D, H, schemes=schemes)


@settings(max_examples=25, deadline=None)
@given(positions=st.lists(st.integers(0, 300), min_size=2, max_size=8, unique=True).map(sorted),
       shift=st.integers(0, 2000))
def test_rope_gaussian_logits_invariant_to_shifts(positions, shift):
    torch.manual_seed(0)
    pe = noisy(Compose(D, H, schemes=[ROPE, GAUSS]))
    _, q, k = tensors(len(positions))
    pos = torch.tensor(positions)

    def logits(p):
        qr, kr = pe.rotate(q, k, p, p)
        return qr @ kr.transpose(-1, -2) / math.sqrt(D // H) + pe.bias(qr, p, p, k=kr)

    torch.testing.assert_close(logits(pos + shift), logits(pos), rtol=1e-4, atol=1e-4)
