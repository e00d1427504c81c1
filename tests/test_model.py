"""Properties of the one attention/Transformer over the schemes (tiny: d 16, 2 heads, 2 layers)."""

from __future__ import annotations

import pytest
import torch

from posenc import ALiBi, PositionalEncoding, RoPE, alibi_slopes, all_schemes
from posenc.nn import Transformer, build_mask
from tests.helpers import D, H, scheme

T = 32


def model(pe: PositionalEncoding, causal: bool = False) -> Transformer:
    torch.manual_seed(0)
    return Transformer(D, H, 2, pe, causal=causal).eval()


def test_nope_mean_pool_is_permutation_invariant():
    m = model(PositionalEncoding(D, H))
    x = torch.randn(2, T, D)
    perm = torch.randperm(T)
    pos = torch.arange(T)
    a = m(x, pos).mean(1)
    b = m(x[:, perm], pos).mean(1)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("cls", [c for c in all_schemes() if c is not PositionalEncoding],
                         ids=lambda c: c.__name__)
def test_any_scheme_breaks_permutation_invariance(cls):
    m = model(scheme(cls))
    x = torch.randn(2, T, D)
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(3))
    pos = torch.arange(T)
    a, b = m(x, pos).mean(1), m(x[:, perm], pos).mean(1)
    assert (a - b).abs().max() > 1e-4


def _logits(pe: PositionalEncoding, q, k, pos):
    q2, k2 = pe.rotate(q, k, pos, pos)
    s = q2 @ k2.transpose(-1, -2)  # (B, H, T, T)
    bias = pe.bias(q2, pos, pos, k=k2)
    return s if bias is None else s + bias


@pytest.mark.parametrize("pe", [RoPE(D, H), RoPE(D, H, layout="half"), ALiBi(D, H)], ids=repr)
def test_relative_schemes_shift_invariant(pe):
    q, k = torch.randn(2, 2, H, T, D // H, dtype=torch.float64)
    pos = torch.arange(T)
    for shift in (1, 17, 1000):
        torch.testing.assert_close(_logits(pe, q, k, pos + shift), _logits(pe, q, k, pos),
                                   atol=2e-4, rtol=1e-4)  # angles are float32


@pytest.mark.parametrize("cls", [c for c in all_schemes() if "conv" not in c.meta.acts_on],
                         ids=lambda c: c.__name__)
@pytest.mark.parametrize("causal", [False, True])
def test_padding_invariance(cls, causal):
    """Outputs at real positions are the same with 0 or 50 padded positions appended."""
    m = model(scheme(cls), causal=causal)
    x = torch.randn(2, T, D)
    pos = torch.arange(T)
    ref = m(x, pos)
    xp = torch.cat([x, torch.randn(2, 50, D)], dim=1)  # (B, T+50, D)
    mask = torch.zeros(2, T + 50, dtype=torch.bool)
    mask[:, T:] = True
    out = m(xp, torch.arange(T + 50), mask)
    torch.testing.assert_close(out[:, :T], ref, atol=1e-5, rtol=1e-4)
    assert out[:, T:].abs().max() == 0


def test_fully_masked_rows_give_no_nan():
    m = model(ALiBi(D, H), causal=True)
    x = torch.randn(2, T, D)
    mask = torch.ones(2, T, dtype=torch.bool)  # every key masked
    out = m(x, torch.arange(T), mask)
    assert torch.isfinite(out).all()
    mask = torch.zeros(2, T, dtype=torch.bool)
    mask[:, :5] = True  # left padding under a causal mask: first rows see no key
    assert torch.isfinite(m(x, torch.arange(T), mask)).all()


def test_causal_model_does_not_see_the_future():
    m = model(RoPE(D, H), causal=True)
    x = torch.randn(1, T, D)
    y = x.clone()
    y[:, 20:] = torch.randn(1, T - 20, D)
    torch.testing.assert_close(m(x, torch.arange(T))[:, :20], m(y, torch.arange(T))[:, :20])


def test_bias_path_equals_dense_reference():
    """SDPA with the scheme's bias equals a plain softmax over q·k/√d + bias (float64)."""
    torch.manual_seed(0)
    pe = ALiBi(D, H)
    m = model(pe).double()
    attn = m.blocks[0].attn
    x = torch.randn(2, T, D, dtype=torch.float64)
    pos = torch.arange(T)
    q, k, v = attn.qkv(x).view(2, T, 3, H, D // H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
    w = (q @ k.transpose(-1, -2) / (D // H) ** 0.5 + pe.bias(q, pos, pos)).softmax(-1)
    ref = attn.out((w @ v).transpose(1, 2).reshape(2, T, D))
    torch.testing.assert_close(attn(x, pos), ref)


def test_alibi_reference_float64():
    """ALiBi bias −m_h·|i−j| with the paper's slopes, rebuilt by loops."""
    pe = ALiBi(D, 8 if D % 8 == 0 else H)
    pos = torch.tensor([0, 3, 4, 10])
    got = pe.bias(torch.zeros(1, pe.n_heads, 4, 2), pos, pos)[0]
    slopes = [2.0 ** (-8.0 * (h + 1) / pe.n_heads) for h in range(pe.n_heads)]
    for h in range(pe.n_heads):
        for i in range(4):
            for j in range(4):
                assert got[h, i, j].item() == pytest.approx(-slopes[h] * abs(int(pos[i]) - int(pos[j])))
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    # non-power-of-2 (paper): 2^-1..2^-8 for 8 heads, then every other slope of 16 heads
    assert alibi_slopes(12).tolist()[8:] == pytest.approx([2.0 ** -(0.5 + i) for i in range(4)])


def test_build_mask_combinations():
    bias = torch.zeros(1, 1, 3, 3)
    assert build_mask(None, None, False, 3, 3, torch.float32, torch.device("cpu")) is None
    m = build_mask(bias, torch.tensor([[False, False, True]]), True, 3, 3, torch.float32,
                   torch.device("cpu"))
    low = torch.finfo(torch.float32).min
    assert m[0, 0, 0, 1] == low and m[0, 0, 2, 2] == low and m[0, 0, 1, 0] == 0


def test_the_shared_encoding_is_saved_once_and_loaded_into_every_layer():
    """Each attention holds the encoding it was built with (one instance for the whole Transformer);
    the state dict names it once, ``pe.…``, as checkpoints always did, and loading fills every layer."""
    from posenc import T5Bias

    m = model(T5Bias(D, H))
    assert all(block.attn.pe is m.pe for block in m.blocks)
    saved = m.state_dict()
    assert [k for k in saved if ".pe." in k or k.startswith("pe.")] == ["pe.table"]
    fresh = model(T5Bias(D, H))
    fresh.load_state_dict({k: v + 1 for k, v in saved.items()})  # strict: no key missing or left over
    for block in fresh.blocks:
        torch.testing.assert_close(block.attn.pe.table, saved["pe.table"] + 1)


def test_assigning_the_encoding_swaps_it_in_every_layer():
    """``model.pe = other`` (how inference-time RoPE scaling swaps schemes) reaches every attention."""
    m = model(RoPE(D, H))
    x, pos = torch.randn(2, T, D), torch.arange(T)
    other = ALiBi(D, H)
    m.pe = other
    assert all(block.attn.pe is other for block in m.blocks)
    torch.testing.assert_close(m(x, pos), model(ALiBi(D, H))(x, pos))
