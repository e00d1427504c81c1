"""One contract over every PositionalEncoding exported by posenc, discovered automatically.

Each scheme is built from its own ``configs/posenc/*.yaml`` (so every scheme must have one).
"""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc import PositionalEncoding, PositionOutOfRange, all_schemes, build_encoding
from tests.helpers import SCHEME_SPECS, D, H

B, T = 3, 12
SCHEMES = all_schemes()


def build(cls: type[PositionalEncoding]) -> PositionalEncoding:
    path = posenc.base.public_class_path(cls)
    assert path in SCHEME_SPECS, f"no configs/posenc/*.yaml names {path}"
    torch.manual_seed(0)
    return build_encoding(SCHEME_SPECS[path], D, H)


def run_hooks(pe: PositionalEncoding, pos: torch.Tensor, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    t = pos.shape[-1]
    x = torch.randn(B, t, D, generator=g)
    q, k = torch.randn(2, B, H, t, D // H, generator=g)
    return pe.embed(x, pos), *pe.rotate(q, k, pos, pos), pe.bias(q, pos, pos, k=k)


@pytest.mark.parametrize("cls", SCHEMES, ids=lambda c: c.__name__)
def test_shapes_dtypes_and_bias_broadcast(cls):
    pe = build(cls).eval()
    x, q, k, bias = run_hooks(pe, torch.arange(T))
    assert x.shape == (B, T, D) and x.dtype == torch.float32
    assert q.shape == k.shape == (B, H, T, D // H) and q.dtype == torch.float32
    if bias is not None:
        assert torch.broadcast_shapes(bias.shape, (B, H, T, T)) == (B, H, T, T)
        assert torch.isfinite(bias).all()
    for out in (x, q, k):
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("cls", SCHEMES, ids=lambda c: c.__name__)
def test_positions_t_and_bt_agree(cls):
    pe = build(cls).eval()
    flat = run_hooks(pe, torch.arange(T) + 3)
    batched = run_hooks(pe, (torch.arange(T) + 3).expand(B, T))
    for a, b in zip(flat, batched, strict=True):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a.expand_as(b), b)


@pytest.mark.parametrize("cls", SCHEMES, ids=lambda c: c.__name__)
def test_lengths_past_training(cls):
    pe = build(cls).eval()
    long = 4 * (pe.max_len or 64)
    pos = torch.arange(long)
    if pe.max_len is not None:
        assert not cls.meta.extrapolates
        with pytest.raises(PositionOutOfRange, match=str(pe.max_len - 1)):
            run_hooks(pe, pos)
    else:
        outs = run_hooks(pe, pos)
        assert all(o is None or torch.isfinite(o).all() for o in outs)


@pytest.mark.parametrize("cls", SCHEMES, ids=lambda c: c.__name__)
def test_state_dict_round_trip(cls):
    pe = build(cls).eval()
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.1 * torch.randn_like(p))
    torch.manual_seed(123)
    other = build_encoding(pe.spec(), D, H).eval()
    other.load_state_dict(pe.state_dict())
    for a, b in zip(run_hooks(pe, torch.arange(T)), run_hooks(other, torch.arange(T)), strict=True):
        if a is not None:
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("cls", SCHEMES, ids=lambda c: c.__name__)
def test_metadata_matches_hooks(cls):
    """A scheme declares where it acts; NoPE-like hooks must leave inputs untouched elsewhere."""
    pe = build(cls).eval()
    x, q, k, bias = run_hooks(pe, torch.arange(T))
    x0, q0, k0, _ = run_hooks(PositionalEncoding(D, H), torch.arange(T))
    acts = set(cls.meta.acts_on)
    if not acts & {"input", "conv"}:
        torch.testing.assert_close(x, x0)
    if "rotate" not in acts:
        torch.testing.assert_close((q, k), (q0, k0))
    if "bias" not in acts:
        assert bias is None
    if pe.meta.translation_invariant:  # the attention reads such a bias from one row of distances
        assert not pe.meta.content_bias
        pos = torch.tensor([0, 3, 4, 9])  # irregular on purpose
        for shift in (1, 250):
            torch.testing.assert_close(pe.bias(q, pos + shift, pos + shift), pe.bias(q, pos, pos))


def test_every_scheme_discovered_has_a_config():
    names = {posenc.base.public_class_path(c) for c in SCHEMES}
    assert names <= set(SCHEME_SPECS), f"schemes without a config: {sorted(names - set(SCHEME_SPECS))}"
    assert {"posenc.RoPE", "posenc.ALiBi", "posenc.Sinusoidal", "posenc.Learned"} <= names
