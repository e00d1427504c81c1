"""posenc.diagnostics against hand computations, and posenc.diagnostic_plots' figures written and readable.

The CLI that writes a config's figures (pipelines.studies.diagnose) is tested in tests/test_diagnose.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc import (
    ALiBi,
    Learned,
    PeriodicRoPE,
    PositionalEncoding,
    RoPE,
    Sinusoidal,
    all_schemes,
    build_encoding,
)
from posenc import diagnostic_plots as plots
from posenc import diagnostics as dg
from posenc.base import public_class_path
from posenc.nn.transformer import Transformer
from tests.helpers import SCHEME_SPECS, D, H, readable_png


def test_features_are_the_table_or_the_rotated_ones_vector():
    pos = torch.arange(40)
    pe = Sinusoidal(D, H)
    torch.testing.assert_close(dg.position_features(pe, pos), pe.table(pos[None])[0].double())
    f = dg.position_features(RoPE(D, H), pos)  # (T, Dh)
    freqs = [10000.0 ** (-2 * i / (D // H)) for i in range(D // H // 2)]
    for t, u in [(0, 5), (7, 30), (39, 2)]:
        ref = 2 * sum(math.cos(w * (t - u)) for w in freqs)  # each all-ones pair has |v|² = 2
        assert float(f[t] @ f[u]) == pytest.approx(ref, abs=1e-5)
    assert dg.position_features(ALiBi(D, H), pos) is None


def test_similarity_curves_overlap_only_for_relative_features():
    pos = torch.arange(64)
    sin = dg.similarity_vs_offset(dg.position_features(Sinusoidal(D, H), pos), [0, 10, 30], 30)
    assert np.allclose(sin, sin[0], atol=1e-6) and sin.shape == (3, 31)
    torch.manual_seed(0)
    learned = dg.similarity_vs_offset(dg.position_features(Learned(D, H, max_len=64), pos), [0, 10, 30], 30)
    assert not np.allclose(learned, learned[0], atol=1e-2)


def test_aliasing_distance_finds_the_common_period_of_pinned_bands():
    pe = PeriodicRoPE(8, 2, periods=[3.0, 10.5])  # head_dim 4: both bands pinned
    feats = dg.position_features(pe, torch.arange(200))
    dist = dg.aliasing_distance(feats, 100, 50)
    assert dist[0] == 0 and dist[21] < 1e-6 and dist[42] < 1e-6  # lcm(3, 10.5) = 21
    assert dist[1:21].min() > 0.1
    assert {21, 42} <= set(dg.local_minima(dist, k=4))
    sin = dg.position_features(Sinusoidal(D, H), torch.arange(200))
    assert dg.aliasing_distance(sin, 100, 50)[1:].min() > 0.01


def test_local_minima_deepest_first():
    assert dg.local_minima(np.array([5, 1, 4, 0.5, 3, 2, 6]), k=2) == [3, 1]


def test_band_periods_mark_pins_and_follow_scaling():
    per, pinned = dg.band_periods(PeriodicRoPE(D, H, periods=[3.0, 10.5]))
    assert sorted(per[pinned].tolist()) == pytest.approx([3.0, 10.5], abs=1e-12)
    plain, _ = dg.band_periods(RoPE(D, H))
    scaled, none = dg.band_periods(RoPE(D, H, scaling={"type": "linear", "factor": 4.0}))
    assert np.allclose(scaled, 4 * plain) and not none.any()
    with pytest.raises(dg.PosencError, match="no rotary bands"):
        dg.band_periods(ALiBi(D, H))


def test_phase_mismatch_signal():
    sig = dg.phase_mismatch_signal(np.array([2 * math.pi / 10.5, 2 * math.pi / 10.0]), 10.5, 20)
    assert np.allclose(sig[0], 1.0)
    assert sig[1, 10] == pytest.approx(math.cos(2 * math.pi / 10.0 * 105.0))
    assert dg.mean_band_signal(np.array([0.1, 0.2]), np.array([0.0]))[0] == 1.0


def test_bias_vs_distance_is_alibi_line():
    b = dg.bias_vs_distance(ALiBi(D, H), 5)
    d = np.arange(-5, 6)
    assert np.allclose(b, -np.abs(d)[None] * np.array([[0.0625], [0.00390625]]))  # 2 heads: 2^-4, 2^-8
    assert dg.bias_vs_distance(RoPE(D, H), 5) is None


@pytest.mark.parametrize("pe, causal, padded", [(ALiBi(D, H), True, False), (RoPE(D, H), False, True)],
                         ids=["alibi-causal", "rope-padded"])
def test_recomputed_attention_weights_reproduce_the_layer_output(pe, causal, padded):
    torch.manual_seed(0)
    m = Transformer(D, H, 2, pe, causal=causal).eval()
    x, pos = torch.randn(2, 12, D), torch.arange(12)
    mask = torch.zeros(2, 12, dtype=torch.bool)
    mask[1, 9:] = padded
    outs, inputs = [], []

    def keep(_mod, args, out):  # returns None, so the layer output is left alone
        inputs.append(args[0])
        outs.append(out)

    hooks = [b.attn.register_forward_hook(keep) for b in m.blocks]
    weights = dg.attention_weights(m, lambda: m(x, pos, mask if padded else None))
    for h in hooks:
        h.remove()
    assert len(weights) == 2
    for attn, w, x_in, out in zip((b.attn for b in m.blocks), weights, inputs, outs, strict=True):
        v = attn.qkv(x_in).view(2, 12, 3, H, D // H)[:, :, 2].transpose(1, 2)  # (B, H, T, Dh)
        ref = attn.out((w @ v).transpose(1, 2).reshape(2, 12, D))
        torch.testing.assert_close(ref, out, atol=1e-5, rtol=1e-5)
        if causal:
            assert w.triu(1).abs().max() == 0


def test_attention_distance_histogram_counts_pairs():
    t = 5
    hist = dg.attention_distance_histogram([torch.full((1, 1, t, t), 1.0 / t)])
    counts = np.array([t] + [2 * (t - d) for d in range(1, t)], dtype=float)
    assert np.allclose(hist, counts / counts.sum())
    shifted = torch.eye(3)[None, None].roll(1, -1)  # query i attends key i + 1 (mod 3)
    sparse = dg.attention_distance_histogram([shifted], torch.tensor([0, 10, 20]))
    assert np.isclose(sparse[10], 2 / 3) and np.isclose(sparse[20], 1 / 3)


@pytest.mark.parametrize("cls", all_schemes(), ids=lambda c: c.__name__)
def test_every_scheme_but_nope_has_a_diagnostic(cls):
    pe = build_encoding(SCHEME_SPECS[public_class_path(cls)], D, H).eval()
    pos = torch.arange(min(64, pe.max_len or 64))
    shown = dg.position_features(pe, pos) is not None or dg.bias_vs_distance(pe, 8) is not None
    assert shown == (cls is not PositionalEncoding)


def test_attention_distance_figure_of_a_model(tmp_path):
    torch.manual_seed(0)
    m = Transformer(D, H, 2, ALiBi(D, H), causal=True).eval()
    inputs = {f"T = {t}": (torch.randn(2, t, D), torch.arange(t)) for t in (16, 64)}
    path, hists = plots.attention_distance_figure(m, inputs, "ALiBi", tmp_path / "attn.png")
    readable_png(path)
    assert [len(h) for h in hists.values()] == [16, 64]
    assert all(np.isclose(h.sum(), 1.0) for h in hists.values())
