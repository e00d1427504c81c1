"""The attention's path choice: once per layer and forward, runtime conditions included, and the
FlexAttention fallback verdict kept on the scheme instance it concerns."""

from __future__ import annotations

import gc
import logging

import pytest
import torch

import posenc.nn.attention as attention
import posenc.nn.share as share
from posenc.nn import Transformer
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


def test_flex_failure_is_kept_on_that_scheme_instance_only(monkeypatch, caplog):
    """A bias FlexAttention cannot trace (DynamicBias's ``torch.unique``) falls back to SDPA with
    the dense reference's result; that instance then never gets the flex path again, while other
    instances of the same class, built before or after it was freed, still do."""
    from torch.nn.attention.flex_attention import flex_attention

    monkeypatch.setitem(attention._FLEX, "fn", flex_attention)  # eager: no compiler needed
    cuda = torch.device("cuda")  # only route()'s argument: nothing runs on it
    cls = next(c for c in BIASED if c.__name__ == "DynamicBias")
    failing, other = scheme(cls), scheme(cls)
    x, pos, kpm = attention_inputs(padded=True)
    x = x.float()
    attn = Transformer(D, H, 1, failing).blocks[0].attn
    with torch.no_grad():
        ctx = AttentionCall(pos, failing, kpm)
        assert route(ctx, T, cuda) == "flex"
        q, k, v = attn.qkv(x).view(2, T, 3, H, D // H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
        with caplog.at_level(logging.WARNING, logger=attention.__name__):
            y = attention.KERNELS["flex"](q, k, v, ctx)  # (B, H, T, Dh)
        assert "FlexAttention unavailable for DynamicBias" in caplog.text
        got = attn.out(y.transpose(1, 2).reshape(2, T, D))  # (B, T, D)
        ref = reference_attention(attn, x, pos, failing, kpm, False)
        torch.testing.assert_close(got[~kpm], ref[~kpm], rtol=1e-5, atol=1e-5)
        assert route(AttentionCall(pos, failing), T, cuda) != "flex"  # any later call, any layer
        assert route(AttentionCall(pos, other), T, cuda) == "flex"
        del failing, ctx, attn
        gc.collect()
        fresh = [scheme(cls) for _ in range(5)]  # may reuse the freed instance's id
        assert all(route(AttentionCall(pos, pe), T, cuda) == "flex" for pe in fresh)
