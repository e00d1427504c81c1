"""The attention's path choice: once per layer and forward, runtime conditions included, and the
FlexAttention fallback verdict kept on the layer it concerns (never on the scheme)."""

from __future__ import annotations

import logging

import pytest
import torch

import posenc.nn.attention as attention
import posenc.nn.flex as flex_kernel
import posenc.nn.share as share
from posenc.nn import AttentionSettings, Transformer
from posenc.nn.attention import AttentionCall, route
from tests.helpers import ATTN_T as T
from tests.helpers import (
    BLOCKED,
    DENSE,
    TOEPLITZ,
    D,
    H,
    attention_inputs,
    biased_schemes,
    other_schemes,
    reference_attention,
    scheme,
)

BIASED, OTHERS = biased_schemes(), other_schemes()
LAYERS = 2

EARLY = AttentionSettings(long_threshold=8)  # the blocked or Flex paths from 9 keys


def counting(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a wrapper that records each result; returns the record."""
    calls = []
    fn = getattr(module, name)

    def wrapper(*a, **kw):
        calls.append(fn(*a, **kw))
        return calls[-1]

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("cls", BIASED + OTHERS, ids=lambda c: c.__name__)
def test_path_is_chosen_once_per_layer_and_forward(cls, monkeypatch):
    """One :func:`choose_path` per layer (padding and positions included), one positions check per
    forward, and the Toeplitz view exactly where its runtime conditions hold."""
    paths = counting(monkeypatch, attention, "choose_path")
    unit_checks = counting(monkeypatch, share, "unit_steps")
    pe = scheme(cls)
    x, _, padded = attention_inputs(padded=True)
    x = x.float()
    for kw in (DENSE, BLOCKED, TOEPLITZ):
        torch.manual_seed(0)
        m = Transformer(D, H, LAYERS, pe, **kw)
        for pos, unit in ((torch.arange(T) + 5, True), (torch.arange(T) * 2, False)):
            for kpm in (None, padded):
                for train in (False, True) if kw is not DENSE else (False,):
                    paths.clear()
                    unit_checks.clear()
                    m.train(train)
                    with torch.set_grad_enabled(train):
                        y = m(x, pos, kpm)
                    if train:
                        y.square().sum().backward()  # checkpointed blocks recompute, never re-choose
                    assert len(paths) == LAYERS and len(set(paths)) == 1, paths
                    assert len(unit_checks) <= 1
                    view = pe.meta.attention_path == "sdpa+toeplitz" and kw is TOEPLITZ
                    assert (paths[0] == "sdpa+toeplitz") == (view and unit and kpm is None), paths[0]


def test_flex_failure_is_kept_on_that_layer_and_the_scheme_is_left_alone(monkeypatch, caplog):
    """Where FlexAttention fails (a kernel that does not compile: simulated here, as on a GPU the
    fallback is what a user gets), the layer falls back to SDPA with the dense reference's result,
    never takes the flex path again, while another layer on the same scheme instance still does,
    and nothing is written onto the scheme."""

    def broken(*args, **kwargs):
        raise RuntimeError("LoweringException: simulated")

    monkeypatch.setitem(flex_kernel._FLEX, "fn", broken)
    cuda = torch.device("cuda")  # only route()'s argument: nothing runs on it
    pe = scheme(next(c for c in BIASED if c.__name__ == "DynamicBias"), heads=1)  # Dh 16: Flex's least
    state_before = set(pe.__dict__)
    x, pos, kpm = attention_inputs(padded=True)
    x = x.float()
    attn, other = (Transformer(D, 1, 1, pe, settings=EARLY).blocks[0].attn for _ in range(2))
    settings = attn.settings  # Flex from 9 keys
    with torch.no_grad():
        ctx = AttentionCall(pos, pe, kpm, settings=settings, flex_ok=attn.flex_ok)
        assert route(ctx, T, cuda) == "flex"
        q, k, v = attn._qkv(x, pos)  # 3 × (B, H, T, Dh)
        with caplog.at_level(logging.WARNING, logger=attention.__name__):
            y = attn._flex_or_sdpa(q, k, v, ctx)  # (B, H, T, Dh)
        assert "FlexAttention unavailable for DynamicBias" in caplog.text
        got = attn.out(y.transpose(1, 2).reshape(2, T, D))  # (B, T, D)
        ref = reference_attention(attn, x, pos, pe, kpm, False)
        torch.testing.assert_close(got[~kpm], ref[~kpm], rtol=1e-5, atol=1e-5)
        assert route(AttentionCall(pos, pe, settings=settings, flex_ok=attn.flex_ok), T, cuda) != "flex"
        assert route(AttentionCall(pos, pe, settings=settings, flex_ok=other.flex_ok), T, cuda) == "flex"
    assert set(pe.__dict__) == state_before


def test_heads_under_flex_minimum_never_take_the_flex_path():
    """FlexAttention's kernels refuse heads under 16 dimensions: such a layer routes to SDPA from the
    start (no compile attempt, no warning), while a 16-dimension head on the same scheme may use it."""
    cuda = torch.device("cuda")  # only route()'s argument: nothing runs on it
    alibi = next(c for c in BIASED if c.__name__ == "ALiBi")
    pos = torch.arange(T)
    small = Transformer(D, 2, 1, scheme(alibi, heads=2), settings=EARLY).blocks[0].attn  # Dh 8
    wide = Transformer(D, 1, 1, scheme(alibi, heads=1), settings=EARLY).blocks[0].attn  # Dh 16
    assert not small.flex_ok and wide.flex_ok
    with torch.no_grad():
        call = lambda a: AttentionCall(pos, a.pe, settings=a.settings, flex_ok=a.flex_ok)  # noqa: E731
        assert route(call(small), T, cuda) == "sdpa-blocked"  # the CUDA path for a long bias
        assert route(call(wide), T, cuda) == "flex"


def test_flex_layers_of_one_forward_share_one_table(monkeypatch):
    """The Flex path's distance table and block mask are built by the first layer of a forward and
    read by the next (``ForwardShare``, as the Toeplitz table is); each layer still matches the dense
    reference. Eager FlexAttention on CPU, 2 layers with their own weights, key padding."""
    from torch.nn.attention.flex_attention import flex_attention

    from posenc.nn.share import ForwardShare

    monkeypatch.setitem(flex_kernel._FLEX, "fn", flex_attention)  # eager: no compiler needed
    pe = scheme(next(c for c in BIASED if c.__name__ == "T5Bias"))
    builds = {"n": 0}
    real = flex_kernel.flex_inputs

    def counted(*args, **kwargs):
        builds["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(flex_kernel, "flex_inputs", counted)
    x, pos, kpm = attention_inputs(padded=True)
    x = x.float()
    layers = [a.blocks[0].attn for a in (Transformer(D, H, 1, pe, causal=True) for _ in range(2))]
    share = ForwardShare()
    with torch.no_grad():
        for attn in layers:
            q, k, v = attn._qkv(x, pos)  # 3 × (B, H, T, Dh)
            y = attention.flex(q, k, v, AttentionCall(pos, pe, kpm, True, share=share))  # (B, H, T, Dh)
            got = attn.out(y.transpose(1, 2).reshape(2, T, D))  # (B, T, D)
            ref = reference_attention(attn, x, pos, pe, kpm, True)
            torch.testing.assert_close(got[~kpm], ref[~kpm], rtol=1e-5, atol=1e-5)
    assert builds["n"] == 1
