"""The log-length attention temperature (``log_scale_len``, posenc.nn.temperature) on every attention path
against a hand-written float64 softmax(s_i·(q·kᵀ/√Dh + bias))·v, identity within the training length,
the path it routes around, and its option through the task and the CLI."""

from __future__ import annotations

import math

import pytest
import torch

import posenc.nn.attention as attention
from posenc import PosencError
from posenc.nn import Attention, Transformer
from posenc.nn.attention import AttentionCall, AttentionSettings, route
from posenc.nn.temperature import length_scale
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
    task,
)

SCHEMES = biased_schemes() + other_schemes()
# the fast suite: one scheme per kind of path (fused, Toeplitz view, learned table, content bias, value
# side); the rest in test-all
FAST = {"PositionalEncoding", "RoPE", "ALiBi", "T5Bias", "DeBERTa", "ShawRelative"}
CASES = [pytest.param(c, id=c.__name__, marks=() if c.__name__ in FAST else pytest.mark.slow)
         for c in SCHEMES]
IDENTITY = [pytest.param(c, id=c.__name__, marks=() if c.__name__ in FAST - {"DeBERTa"} else pytest.mark.slow)
            for c in SCHEMES]  # with gradients on three paths: DeBERTa's content bias is the slowest
L0 = 8  # the "training length": ATTN_T = 40 rows attend up to 40 keys, so s_i reaches log 40 / log 8 ≈ 1.77


def model(pe, causal, log_scale_len, **kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(D, H, 2, pe, causal=causal, log_scale_len=log_scale_len, **kw).double().eval()


@pytest.mark.parametrize("cls", CASES)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_every_path_matches_the_float64_reference(cls, causal, padded):
    pe = scheme(cls).double()
    x, pos, kpm = attention_inputs(padded)
    keep = slice(None) if kpm is None else ~kpm  # padded queries: any finite value is fine
    for kw in (DENSE, BLOCKED, TOEPLITZ):
        m = model(pe, causal, L0, **kw)
        attn = m.blocks[0].attn
        got = attn(x, pos, kpm)
        ref = reference_attention(attn, x, pos, pe, kpm, causal, L0)
        torch.testing.assert_close(got[keep], ref[keep], rtol=1e-9, atol=1e-10)
        plain = reference_attention(attn, x, pos, pe, kpm, causal)  # s = 1: the temperature does change it
        assert (plain[keep] - ref[keep]).abs().max() > 1e-4
        weights = attn.weights(x, pos, kpm)  # the diagnostics' weights use it too
        assert torch.isfinite(weights).all()


@pytest.mark.parametrize("cls", IDENTITY)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_identical_to_plain_attention_within_the_training_length(cls, causal):
    """T ≤ L0: bit for bit the attention without the option, outputs and gradients, on every path."""
    pe = scheme(cls).double()
    x, pos, kpm = attention_inputs(padded=True)
    for kw in (DENSE, BLOCKED, TOEPLITZ):
        outs = []
        for train_len in (None, T):  # L0 = T: every row attends at most L0 keys
            m = model(pe, causal, train_len, **kw).train()
            pe.zero_grad()
            xi = x.clone().requires_grad_()
            y = m(xi, pos, kpm)
            y.square().sum().backward()
            outs.append([y.detach(), xi.grad] + [p.grad.clone() for p in pe.parameters()])
        for other in outs[1:]:
            for a, b in zip(outs[0], other, strict=True):
                assert torch.equal(a, b)


@pytest.mark.parametrize("cls", [c for c in SCHEMES if c.__name__ in ("T5Bias", "ALiBi", "ShawRelative")],
                         ids=lambda c: c.__name__)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_training_gradients_agree_across_paths(cls, causal):
    """The Toeplitz view's own backward (T5's learned table), the checkpointed blocks and the clipped
    kernel give the dense path's gradients under the temperature too."""
    pe = scheme(cls).double()
    x, pos, _ = attention_inputs(padded=False)
    grads = []
    for kw in (DENSE, BLOCKED, TOEPLITZ):
        m = model(pe, causal, L0, **kw).train()
        pe.zero_grad()
        xi = x.clone().requires_grad_()
        (m(xi, pos) ** 2).sum().backward()
        grads.append([xi.grad] + [p.grad.clone() for p in pe.parameters()])
    for other in grads[1:]:
        for a, b in zip(grads[0], other, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-8, atol=1e-10)


def test_length_scale_values():
    s = length_scale(16, 4, True, None, torch.zeros((), dtype=torch.float64))  # (1, 1, 16, 1)
    expected = [max(1.0, math.log(i + 1) / math.log(4)) for i in range(16)]
    torch.testing.assert_close(s.flatten(), torch.tensor(expected, dtype=torch.float64))
    assert s.flatten()[3] == 1.0 and s.flatten()[15] == 2.0  # n = 4 = L0 and n = 16 = L0²
    bidir = length_scale(16, 4, False, None, torch.zeros(()))
    assert torch.allclose(bidir, torch.tensor(2.0))
    pad = torch.zeros(2, 16, dtype=torch.bool)
    pad[0, 8:] = True  # row 0 has 8 real keys
    rows = length_scale(16, 4, False, pad, torch.zeros(())).flatten(1)  # (2, 16)
    assert torch.allclose(rows[0], torch.tensor(1.5)) and torch.allclose(rows[1], torch.tensor(2.0))
    assert length_scale(16, 16, True, None, torch.zeros(())) is None
    assert length_scale(16, None, True, None, torch.zeros(())) is None


def test_routes_around_the_toeplitz_view_and_flex_only_where_the_scale_varies():
    alibi = scheme(next(c for c in SCHEMES if c.__name__ == "ALiBi"))
    pos = torch.arange(T)
    q = torch.zeros(1, H, T, D // H)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    long = AttentionSettings(long_threshold=8)  # Flex is for keys past long_threshold

    def path(causal, train_len, device=cpu, settings=None):
        scale = length_scale(T, train_len, causal, None, q)
        call = AttentionCall(pos, alibi, causal=causal, row_scale=scale,
                             settings=settings or AttentionSettings())
        return route(call, T, device)

    assert path(True, None) == path(False, None) == path(False, L0) == "sdpa+toeplitz"
    assert path(True, L0) == "sdpa+bias"  # per-row scales: no Toeplitz view
    assert path(True, None, cuda) == path(True, L0, cuda) == "sdpa+bias"
    assert path(True, None, cuda, long) == "flex" and path(True, L0, cuda, long) == "sdpa-blocked"


def test_causal_long_call_takes_the_blocked_path(monkeypatch):
    chosen = []
    choose = attention.choose_path

    def spy(*a, **kw):
        chosen.append(choose(*a, **kw))
        return chosen[-1]

    monkeypatch.setattr(attention, "choose_path", spy)
    pe = scheme(next(c for c in SCHEMES if c.__name__ == "ALiBi"))
    with torch.no_grad():
        early = AttentionSettings(long_threshold=16)
        m = Transformer(D, H, 1, pe, causal=True, settings=early, log_scale_len=L0)
        m(torch.randn(1, T, D), torch.arange(T))
    assert chosen == ["sdpa-blocked"]


@pytest.mark.parametrize("bad", [0, 1, 2.5, True, "128"])
def test_bad_log_scale_len_is_one_line_error(bad):
    with pytest.raises(PosencError, match="log_scale_len .* must be an integer >= 2 or null"):
        Attention(D, H, log_scale_len=bad)


def test_task_option_reaches_every_layer_and_the_checkpoint():
    from pipelines.tasks.dna.lm import DNALanguageModel

    m = task(DNALanguageModel, d_model=D, n_heads=H, n_layers=2, log_scale_len=32)
    assert [b.attn.log_scale_len for b in m.backbone.blocks] == [32, 32]
    assert m.hparams["net"]["log_scale_len"] == 32
    again = task(DNALanguageModel, **dict(m.hparams))
    assert again.backbone.blocks[1].attn.log_scale_len == 32
    with pytest.raises(PosencError, match="log_scale_len"):
        task(DNALanguageModel, d_model=D, n_heads=H, n_layers=2, log_scale_len=1)
