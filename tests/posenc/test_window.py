"""The local attention window (``window`` = w: query i attends keys with |i − j| < w; LM-Infinite's
local branch) on every attention path against a hand-written float64 reference, with and without the
log-length temperature; identity when w ≥ T; gradients when training with it; and the setting's errors."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import PosencError
from posenc.nn import Transformer
from posenc.nn.mask import band
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
)

FAST = {"PositionalEncoding", "RoPE", "ALiBi", "T5Bias", "DeBERTa", "ShawRelative"}
CASES = [pytest.param(c, id=c.__name__, marks=() if c.__name__ in FAST else pytest.mark.slow)
         for c in biased_schemes() + other_schemes()]
W = 7  # ATTN_T = 40 rows in blocks of at most W rows, each block reaching keys W − 1 rows before it


def model(pe, causal, window, log_scale_len=None, **kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(D, H, 2, pe, causal=causal, window=window, log_scale_len=log_scale_len,
                       **kw).double().eval()


@pytest.mark.parametrize("cls", CASES)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_every_path_matches_the_float64_reference(cls, causal, padded):
    pe = scheme(cls).double()
    x, pos, kpm = attention_inputs(padded)
    keep = slice(None) if kpm is None else ~kpm  # padded queries: any finite value is fine
    for kw in (DENSE, BLOCKED, TOEPLITZ):
        attn = model(pe, causal, W, **kw).blocks[0].attn
        got = attn(x, pos, kpm)
        ref = reference_attention(attn, x, pos, pe, kpm, causal, window=W)
        torch.testing.assert_close(got[keep], ref[keep], rtol=1e-9, atol=1e-10)
        full = reference_attention(attn, x, pos, pe, kpm, causal)  # the window does change it
        assert (full[keep] - ref[keep]).abs().max() > 1e-4
        weights = attn.weights(x, pos, kpm)  # (B, H, T, T): nothing outside the window
        far = ~band(T, T, 0, causal, W, x.device)
        assert weights[..., far].abs().max() == 0


@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_with_the_log_length_temperature(causal):
    """n_i counts only the keys inside the window: s_i = max(1, ln n_i / ln L0)."""
    pe = scheme(next(c for c in biased_schemes() if c.__name__ == "ALiBi")).double()
    x, pos, kpm = attention_inputs(padded=True)
    keep = ~kpm
    attn = model(pe, causal, 12, log_scale_len=4, **BLOCKED).blocks[0].attn
    ref = reference_attention(attn, x, pos, pe, kpm, causal, train_len=4, window=12)
    torch.testing.assert_close(attn(x, pos, kpm)[keep], ref[keep], rtol=1e-9, atol=1e-10)


def test_the_temperature_counts_keys_inside_the_window():
    s = length_scale(16, 2, True, None, torch.zeros((), dtype=torch.float64), window=4).flatten()  # (16,)
    n = torch.tensor([1, 2, 3] + [4] * 13, dtype=torch.float64)  # causal keys seen: min(i + 1, 4)
    torch.testing.assert_close(s, (n.log() / torch.log(torch.tensor(2.0))).clamp(min=1))
    bidir = length_scale(16, 2, False, None, torch.zeros((), dtype=torch.float64), window=4).flatten()
    assert bidir[0] == 2 and bidir[8] == pytest.approx(math.log2(7))  # keys 0..3; keys 5..11
    assert length_scale(16, 4, True, None, torch.zeros(()), window=4) is None  # no row sees more than L0


@pytest.mark.parametrize("cls", [c.values[0] for c in CASES if c.id in ("RoPE", "ALiBi", "ShawRelative")],
                         ids=lambda c: c.__name__)
def test_a_window_as_long_as_the_input_changes_nothing(cls):
    """w ≥ T: outputs and gradients bit for bit those of full attention (the path is not changed)."""
    pe = scheme(cls).double()
    x, pos, kpm = attention_inputs(padded=True)
    outs = []
    for window in (None, T):
        m = model(pe, True, window).train()
        xi = x.clone().requires_grad_()
        y = m(xi, pos, kpm)
        y.square().sum().backward()
        outs.append((y.detach(), xi.grad))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_gradients_through_the_windowed_blocks_match_the_reference():
    """Training with a window (checkpointed blocks): input gradients equal the reference's."""
    pe = scheme(next(c for c in biased_schemes() if c.__name__ == "T5Bias")).double()
    x, pos, _ = attention_inputs(padded=False)
    attn = model(pe, True, W, **BLOCKED).train().blocks[0].attn
    grads = []
    for fn in (lambda z: attn(z, pos), lambda z: reference_attention(attn, z, pos, pe, None, True, window=W)):
        z = x.clone().requires_grad_()
        fn(z).square().sum().backward()
        grads.append(z.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-9, atol=1e-10)


def test_window_is_set_on_every_layer_and_checked():
    m = model(scheme(next(c for c in other_schemes() if c.__name__ == "RoPE")), True, None)
    assert m.window is None
    m.window = 16
    assert [b.attn.window for b in m.blocks] == [16, 16]
    for bad in (0, -3, 2.5, True):
        with pytest.raises(PosencError, match="attention window must be an integer >= 1"):
            m.window = bad
