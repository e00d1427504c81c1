"""Every attention path (dense SDPA, query blocks, explicit, FlexAttention) against one dense reference.

The reference (tests/helpers.py) is written from the hooks alone: softmax(q·kᵀ/√Dh + bias + mask)·v plus the
value-side term, in float64. Blocked runs use a tiny threshold and one-row-per-16 blocks, so a
T = 40 input is split into blocks of 16, 16 and 8 rows.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from posenc import PositionalEncoding, SchemeMeta, build_encoding
from posenc.nn.attention import AttentionCall, AttentionSettings, choose_path, route
from posenc.nn.transformer import Transformer, length_bucket
from tests.helpers import ATTN_T as T
from tests.helpers import (
    BLOCKED,
    DENSE,
    SCHEME_SPECS,
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
TABLE_BIASED = [c for c in BIASED if c.meta.attention_path == "sdpa+toeplitz"]  # what Flex may run
WIDE = 32  # 2 heads of 16 dimensions: FlexAttention's least head, and more than one head to index


def model(pe, causal=False, **kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(D, H, 2, pe, causal=causal, **kw).double().eval()


@pytest.mark.parametrize("cls", BIASED + OTHERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_every_path_matches_dense_reference(cls, causal, padded):
    pe = scheme(cls).double()
    x, pos, kpm = attention_inputs(padded)
    for kw in (DENSE, BLOCKED, TOEPLITZ):
        m = model(pe, causal, **kw)
        attn = m.blocks[0].attn
        got = attn(x, pos, kpm)
        ref = reference_attention(attn, x, pos, pe, kpm, causal)
        keep = slice(None) if kpm is None else ~kpm  # padded queries: any finite value is fine
        torch.testing.assert_close(got[keep], ref[keep], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("cls", BIASED, ids=lambda c: c.__name__)
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_training_gradients_match_dense(cls, padded, causal):
    """Checkpointed blocks and the Toeplitz view (its table gradient computed by blocks of query
    rows) give the dense path's gradients, for the inputs and the scheme's parameters."""
    pe = scheme(cls).double()
    x, pos, kpm = attention_inputs(padded=padded)
    grads = []
    for kw in (DENSE, BLOCKED, TOEPLITZ):
        m = model(pe, causal=causal, **kw).train()
        pe.zero_grad()
        xi = x.clone().requires_grad_()
        (m(xi, pos, kpm) ** 2).sum().backward()
        grads.append([xi.grad] + [p.grad.clone() for p in pe.parameters()])
    for other in grads[1:]:
        for a, b in zip(grads[0], other, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("cls", BIASED, ids=lambda c: c.__name__)
def test_blocked_path_never_builds_a_full_bias(cls):
    """Memory linear in L: every bias the scheme is asked for covers at most one block of rows."""
    pe = scheme(cls)
    shapes = []
    hook = pe.bias

    def spy(q, q_pos, k_pos, k=None):
        out = hook(q, q_pos, k_pos, k=k)
        shapes.append(tuple(out.shape))
        return out

    pe.bias = spy
    m = Transformer(D, H, 2, pe, **BLOCKED).eval()
    with torch.no_grad():
        m(torch.randn(1, 100, D), torch.arange(100))
    assert shapes and all(s[-2] <= 16 and s[-1] == 100 for s in shapes)
    if pe.meta.translation_invariant:  # the default path: one row of 2T − 1 distances per forward
        shapes.clear()
        with torch.no_grad():
            Transformer(D, H, 2, pe).eval()(torch.randn(1, 100, D), torch.arange(100))
        assert shapes == [(1, H, 1, 199)]


def test_position_only_bias_is_built_once_per_forward():
    calls = {"n": 0}
    for cls, expected in ((c, 1) for c in BIASED if not c.meta.content_bias):
        pe = scheme(cls)
        hook = pe.bias

        def spy(*a, _hook=hook, **kw):
            calls["n"] += 1
            return _hook(*a, **kw)

        pe.bias = spy
        calls["n"] = 0
        Transformer(D, H, 3, pe)(torch.randn(1, 12, D), torch.arange(12))
        assert calls["n"] == expected, cls.__name__
    deberta = next(c for c in BIASED if c.meta.content_bias)
    pe = scheme(deberta)
    hook = pe.bias
    pe.bias = lambda *a, **kw: (calls.__setitem__("n", calls["n"] + 1), hook(*a, **kw))[1]
    calls["n"] = 0
    Transformer(D, H, 3, pe)(torch.randn(1, 12, D), torch.arange(12))
    assert calls["n"] == 3  # content biases depend on each layer's q and k


def test_path_comes_from_metadata_only():
    s = AttentionSettings(long_threshold=100)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    position = SchemeMeta(acts_on=("bias",))
    content = SchemeMeta(acts_on=("bias",), content_bias=True)
    shaw = SchemeMeta(acts_on=("bias",), content_bias=True, value_term=True)
    assert choose_path(SchemeMeta(acts_on=("rotate",)), 10**6, cpu, s) == "sdpa-fused"
    assert choose_path(position, 100, cpu, s) == "sdpa+bias"
    assert choose_path(position, 101, cpu, s) == "sdpa-blocked"
    assert choose_path(position, 101, cuda, s) == "sdpa-blocked"  # Flex reads distance tables only
    assert choose_path(position, 101, cuda, s, dropout=0.1) == "sdpa-blocked"
    assert choose_path(content, 101, cuda, s) == "sdpa-blocked"
    assert choose_path(shaw, 100, cpu, s) == "explicit"
    assert choose_path(shaw, 101, cpu, s) == "explicit-blocked"
    shift = SchemeMeta(acts_on=("bias",), translation_invariant=True)
    assert choose_path(shift, 10**6, cpu, s) == "sdpa+toeplitz"
    assert choose_path(shift, 10**6, cpu, AttentionSettings(100, toeplitz=False)) == "sdpa-blocked"
    assert choose_path(shift, 101, cuda, s) == "flex"  # past long_threshold: Flex, memory linear in T
    assert choose_path(shift, 100, cuda, s) == "sdpa+bias"  # up to it the dense bias (faster there)
    assert choose_path(shift, 101, cuda, s, dropout=0.1) == "sdpa-blocked"
    assert choose_path(shift, 100, cuda, s, dropout=0.1) == "sdpa+bias"  # the view is CPU-only

    class Mine(PositionalEncoding):  # a user's scheme: only its metadata matters
        meta = position

    assert choose_path(Mine.meta, 101, cuda, s) == choose_path(position, 101, cuda, s)


def test_bf16_autocast_keeps_angles_float32_and_tracks_float32():
    pe = build_encoding({"class_path": "posenc.RoPE"}, D, H)
    pos = torch.arange(4096, 4096 + 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert pe.angles(pos).dtype == torch.float32
    for cls in (BIASED[0], OTHERS[1]):
        m = Transformer(D, H, 2, scheme(cls), settings=AttentionSettings(long_threshold=16)).eval()
        x = torch.randn(2, 64, D)
        ref = m(x, pos)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = m(x, pos)
        assert torch.isfinite(low).all()
        assert (low.float() - ref).abs().mean() < 0.05  # bf16 rounding, not a wrong rotation or bias


def test_toeplitz_table_gradient_under_bf16_autocast_tracks_float32():
    """The learned table's gradient is summed in float32 even when attention runs in bf16."""
    pe = scheme(next(c for c in BIASED if c.__name__ == "T5Bias"))
    m = Transformer(D, H, 2, pe).train()
    x, pos = torch.randn(2, 64, D), torch.arange(64)
    grads = []
    for low in (False, True):
        pe.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            m(x, pos).float().square().mean().backward()
        grads.append(pe.table.grad.clone())
    ref, got = grads
    assert torch.isfinite(got).all()
    assert (got - ref).norm() < 0.1 * ref.norm()  # bf16 rounding, not a lost or misplaced sum


def test_transformer_takes_its_attention_settings_as_one_value():
    """Every layer gets the one ``settings`` value; a flat setting of before names its new place, and the
    arguments after the encoding are keywords."""
    settings, pe = AttentionSettings(long_threshold=8, toeplitz=False), PositionalEncoding(D, H)
    m = Transformer(D, H, 2, pe, d_ff=24, causal=True, settings=settings)
    assert all(b.attn.settings is settings and b.attn.causal for b in m.blocks)
    assert m.blocks[0].mlp[0].out_features == 24
    with pytest.raises(TypeError, match=r"settings=AttentionSettings\(long_threshold=8, compile=True\)"):
        Transformer(D, H, 2, pe, long_threshold=8, compile=True)
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['heads'\]"):
        Transformer(D, H, 2, pe, heads=3)
    with pytest.raises(TypeError, match="positional"):
        Transformer(D, H, 2, pe, 24)


def test_length_bucket():
    assert [length_bucket(n) for n in (1, 16, 17, 100, 512, 513, 4096, 5000)] == [
        16, 16, 20, 112, 512, 640, 4096, 5120]
    for n in range(1, 3000):
        assert n <= length_bucket(n) <= max(16, 1.25 * n)


def test_compile_switch_leaves_state_dict_and_pickle_alone():
    pe = scheme(BIASED[0])
    a = Transformer(D, H, 2, pe)
    b = Transformer(D, H, 2, pe, settings=AttentionSettings(compile=True))
    assert a.state_dict().keys() == b.state_dict().keys()
    pickle.loads(pickle.dumps(b))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["posenc.RoPE", "posenc.ALiBi", "posenc.ConvPE"])
def test_compiled_model_matches_eager(name):
    pe = build_encoding(SCHEME_SPECS[name], D, H)
    torch.manual_seed(0)
    m = Transformer(D, H, 2, pe, causal=True).eval()
    c = Transformer(D, H, 2, pe, causal=True, settings=AttentionSettings(compile=True)).eval()
    c.load_state_dict(m.state_dict())
    for length in (37, 40):  # same bucket: one compilation
        x = torch.randn(2, length, D)
        torch.testing.assert_close(c(x, torch.arange(length)), m(x, torch.arange(length)),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", TABLE_BIASED, ids=lambda c: c.__name__)
@pytest.mark.parametrize("causal", [False, True])
def test_flex_attention_matches_dense_on_cuda(cls, causal):
    """On CUDA every translation-invariant position-only bias takes FlexAttention (it reads the
    scheme's distance table) and matches the dense reference."""
    pe = scheme(cls, heads=2, d_model=WIDE).cuda()
    x, pos, kpm = attention_inputs(padded=True, width=WIDE)
    x, pos, kpm = x.float().cuda(), pos.cuda(), kpm.cuda()
    m = Transformer(WIDE, 2, 2, pe, causal=causal,
                    settings=AttentionSettings(long_threshold=8)).cuda().eval()  # Flex from 9 keys
    attn = m.blocks[0].attn
    with torch.no_grad():
        ctx = AttentionCall(pos, pe, kpm, causal, settings=attn.settings, flex_ok=attn.flex_ok)
        assert route(ctx, T, x.device) == "flex"
        got = attn(x, pos, kpm)
        ref = reference_attention(attn, x, pos, pe, kpm, causal)
    assert attn.flex_ok, f"{cls.__name__}: FlexAttention failed and fell back to SDPA"
    torch.testing.assert_close(got[~kpm], ref[~kpm], rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_flex_trains_under_bf16_autocast_like_sdpa():
    """The training step `configs/trainer/gpu.yaml` runs (bf16 autocast, backward) takes Flex for
    ALiBi (no parameters of its own) and gives SDPA's outputs and gradients, to bf16's precision."""
    alibi = next(c for c in TABLE_BIASED if c.__name__ == "ALiBi")
    x, pos, kpm = attention_inputs(padded=True, width=WIDE)
    x, pos, kpm = x.float().cuda(), pos.cuda(), kpm.cuda()
    outs, grads = [], []
    for flex in (True, False):
        torch.manual_seed(0)
        early = AttentionSettings(flex=flex, long_threshold=8)  # Flex (or blocked SDPA) from 9 keys
        pe = scheme(alibi, heads=2, d_model=WIDE)
        m = Transformer(WIDE, 2, 2, pe, causal=True, settings=early).cuda().train()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(x, pos, kpm)
        y.float()[~kpm].square().mean().backward()
        assert all(b.attn.flex_ok for b in m.blocks) or not flex, "Flex fell back to SDPA"
        outs.append(y.float()[~kpm])
        grads.append(m.blocks[0].attn.qkv.weight.grad)
    torch.testing.assert_close(outs[0], outs[1], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(grads[0], grads[1], rtol=5e-2, atol=5e-3)


@pytest.mark.slow  # compiles FlexAttention for the CPU: ~20-90 s here
def test_flex_kernel_reads_each_schemes_table_in_one_process():
    """The compiled kernel, reused across schemes in one process (as a sweep does), reads each call's
    own distance table: checked on the CPU build of FlexAttention against the dense reference, 2 heads.
    T = 128: torch 2.13's compiled CPU flex gets batch rows after the first wrong when T is not a
    multiple of its 128-row block, bias or none (the library routes to Flex on CUDA only)."""
    from posenc.nn.flex import flex_attention_bias

    g = torch.Generator().manual_seed(3)
    x, pos = torch.randn(2, 128, D, generator=g), torch.arange(128) + 5
    kpm = torch.zeros(2, 128, dtype=torch.bool)
    kpm[0, 100:] = True
    for cls in TABLE_BIASED:
        pe = scheme(cls, heads=2)
        attn = Transformer(D, 2, 1, pe, causal=True).blocks[0].attn.eval()
        with torch.no_grad():
            q, k, v = attn._qkv(x, pos)  # 3 × (B, H, T, Dh)
            y = flex_attention_bias(q, k, v, pe, pos, kpm, True)  # (B, H, T, Dh)
            got = attn.out(y.transpose(1, 2).reshape(2, 128, D))  # (B, T, D)
            ref = reference_attention(attn, x, pos, pe, kpm, True)
        torch.testing.assert_close(got[~kpm], ref[~kpm], rtol=1e-4, atol=1e-5, msg=cls.__name__)


def test_mask_kept_between_evaluation_forwards_only_while_valid():
    """The cached position-only mask is reused for equal positions and parameters, rebuilt otherwise."""
    pe = scheme(next(c for c in BIASED if c.__name__ == "T5Bias"))
    calls = {"n": 0}
    hook = pe.bias

    def spy(*a, **kw):
        calls["n"] += 1
        return hook(*a, **kw)

    pe.bias = spy
    m = Transformer(D, H, 2, pe).eval()
    x, pos = torch.randn(1, 12, D), torch.arange(12)
    with torch.no_grad():
        a = m(x, pos)
        m(x, pos)
        assert calls["n"] == 1  # second forward reused the mask
        m(x, pos + 1)
        assert calls["n"] == 2  # other positions
        pe.table.add_(torch.randn_like(pe.table))  # a parameter update (as an optimizer step) invalidates it
        b = m(x, pos)
        assert calls["n"] == 3 and not torch.allclose(a, b)
    m(x, pos).sum().backward()  # with autograd: never cached, gradients reach the table
    assert calls["n"] == 4 and pe.table.grad is not None and pe.table.grad.abs().sum() > 0


@pytest.mark.parametrize("cls", TABLE_BIASED, ids=lambda c: c.__name__)
def test_flex_score_mod_matches_dense_reference_eager_cpu(cls, monkeypatch):
    """The FlexAttention score_mod (a lookup in the scheme's distance table) and mask_mod, run by eager
    flex_attention on CPU (inference only), 2 heads, contiguous positions and positions with a gap."""
    from torch.nn.attention.flex_attention import flex_attention

    import posenc.nn.attention as attention
    import posenc.nn.flex as flex_kernel

    monkeypatch.setitem(flex_kernel._FLEX, "fn", flex_attention)  # eager: no compiler needed
    pe = scheme(cls)
    x, pos, kpm = attention_inputs(padded=True)
    x = x.float()
    gapped = torch.cat([torch.arange(20), torch.arange(20) + 37])  # (T,): a gap of 17 in the middle
    attn = Transformer(D, H, 1, pe).blocks[0].attn
    for causal, p in ((False, pos), (True, pos), (True, gapped)):
        with torch.no_grad():
            q, k, v = attn._qkv(x, p)  # 3 × (B, H, T, Dh)
            y = attention.flex(q, k, v, attention.AttentionCall(p, pe, kpm, causal))  # (B, H, T, Dh)
            got = attn.out(y.transpose(1, 2).reshape(2, T, D))
            ref = reference_attention(attn, x, p, pe, kpm, causal)
        torch.testing.assert_close(got[~kpm], ref[~kpm], rtol=1e-5, atol=1e-5)
