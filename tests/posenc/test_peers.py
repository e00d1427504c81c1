"""posenc against the implementations practitioners already run, on identical inputs.

Peers: Hugging Face transformers (rope init functions, Llama's half-split rotation, BLOOM's ALiBi,
T5's buckets and bias), rotary-embedding-torch (interleaved rotation, xPos) and x-transformers
(ALiBi). Each test skips, naming the package, when its peer is not installed (they are in the
``dev`` extra). Frequencies the peers form in float32 are compared to float32 rounding (a few ulp);
rotations given the same frequencies are compared in float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posenc import ALiBi, RoPE, T5Bias, XPos
from posenc.bias import alibi_slopes
from posenc.learned_bias import t5_relative_bucket
from posenc.nn import Attention

ULP32 = 6e-8  # float32 unit roundoff: 2^-24


def need(module: str):
    """The peer ``module``, or a skip naming it."""
    return pytest.importorskip(module, reason=f"peer package {module.split('.')[0]} is not installed")


# ------------------------------------------------------------------------------ HF rope init
def hf_rope(head_dim: int, train_len: int, params: dict, seq_len: int | None = None):
    """(inv_freq, attention factor) from HF's ``ROPE_INIT_FUNCTIONS`` for a Llama config."""
    need("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=train_len, rope_parameters=dict(params))
    inv_freq, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", seq_len=seq_len)
    return inv_freq.double(), float(factor)


def close32(ours: torch.Tensor, peer: torch.Tensor, ulps: float = 8.0) -> None:
    """Equal to float32 rounding: the peer forms these in float32 (a pow, a divide, a mix: a few ulp
    each; ≤ 5 ulp measured for BLOOM's slopes and HF's PI), posenc in float64."""
    torch.testing.assert_close(ours.double(), peer.double(), rtol=ulps * ULP32, atol=0.0)


def yarn_params(s: float, train_len: int) -> dict:
    return {"rope_type": "yarn", "rope_theta": 10000.0, "factor": s,
            "original_max_position_embeddings": train_len}


GRID = [(64, 10000.0, 2048), (128, 10000.0, 4096), (128, 500000.0, 8192), (32, 10000.0, 512)]


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("s", [2.0, 4.0, 8.0, 3.5])
def test_position_interpolation_matches_hf(dh, base, train_len, s):
    peer, _ = hf_rope(dh, train_len, {"rope_type": "linear", "rope_theta": base, "factor": s})
    close32(RoPE(2 * dh, 2, base=base, scaling="linear", scale_factor=s).scaled_frequencies(), peer)


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("s", [2.0, 4.0, 16.0])
def test_ntk_matches_hf_dynamic_at_the_span_that_gives_its_scale(dh, base, train_len, s):
    """HF has no static NTK; its dynamic NTK with factor 1 at seq_len = s·L₀ has base·s^(d/(d−2))."""
    peer, _ = hf_rope(dh, train_len, {"rope_type": "dynamic", "rope_theta": base, "factor": 1.0},
                      seq_len=int(s * train_len))
    close32(RoPE(2 * dh, 2, base=base, scaling="ntk", scale_factor=s).scaled_frequencies(), peer, 8.0)


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("a", [1.0, 2.0])
@pytest.mark.parametrize("ratio", [0.5, 1.0, 1.5, 4.0])
def test_dynamic_ntk_matches_hf(dh, base, train_len, a, ratio):
    span = int(ratio * train_len)
    peer, _ = hf_rope(dh, train_len, {"rope_type": "dynamic", "rope_theta": base, "factor": a}, seq_len=span)
    pe = RoPE(2 * dh, 2, base=base, scaling="dynamic_ntk", scale_factor=a, train_len=train_len)
    close32(pe.scaled_frequencies(torch.tensor([float(span)]))[0], peer, 8.0)


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("s", [2.0, 4.0, 8.0, 16.0, 3.5])
@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_matches_hf(dh, base, train_len, s, truncate):
    """Frequencies to float32 rounding and the attention factor (on q and on k) exactly."""
    params = {"rope_type": "yarn", "rope_theta": base, "factor": s,
              "original_max_position_embeddings": train_len, "truncate": truncate}
    peer, factor = hf_rope(dh, train_len, params)
    pe = RoPE(2 * dh, 2, base=base, scaling="yarn", scale_factor=s, train_len=train_len, truncate=truncate)
    # truncate=False: HF rounds the fractional ramp (i − low)/(high − low) to float32 before mixing
    # (measured over this grid: ≤ 5 ulp truncated, ≤ 15.4 ulp not)
    close32(pe.scaled_frequencies(), peer, 8.0 if truncate else 16.0)
    assert pe.attention_factor() == pytest.approx(factor, rel=1e-15)


def test_yarn_paper_variant_is_not_what_hf_runs():
    """The paper-equation ramp (the old default) differs from HF by far more than rounding."""
    peer, _ = hf_rope(64, 2048, yarn_params(4.0, 2048))
    paper = RoPE(128, 2, scaling="yarn_paper", scale_factor=4.0, train_len=2048).scaled_frequencies()
    assert (paper / peer - 1).abs().max() > 0.4


# ------------------------------------------------------------------------------ rotations
def hf_rotate(q, k, pos, inv_freq, attention_factor: float = 1.0):
    """Llama's half-split rotation (``apply_rotary_pos_emb``) with cos/sin built as HF builds them."""
    need("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    angles = pos[:, None] * inv_freq[None, :]  # (T, Dh/2)
    emb = torch.cat((angles, angles), dim=-1)  # (T, Dh)
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor
    return apply_rotary_pos_emb(q, k, cos[None], sin[None])  # unsqueeze_dim=1: (1, 1, T, Dh)


def qkv64(T: int, dh: int = 16, heads: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, heads, T, dh, generator=g, dtype=torch.float64) for _ in range(3)]


def test_rope_half_layout_matches_hf_llama_rotation():
    q, k, _ = qkv64(40)
    pos = torch.arange(40, dtype=torch.float64) * 37.0  # up to 1443
    pe = RoPE(32, 2, layout="half")
    ours = pe.rotate(q, k, pos, pos)
    peer = hf_rotate(q, k, pos, pe.frequencies())
    for a, b in zip(ours, peer, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=5e-13)


def test_rope_interleaved_layout_matches_rotary_embedding_torch():
    ret = need("rotary_embedding_torch")
    q, k, _ = qkv64(40)
    pe = RoPE(32, 2)
    rot = ret.RotaryEmbedding(dim=16)
    close32(pe.inv_freq, rot.freqs.detach())  # its own float32 ladder
    rot = rot.double()
    rot.freqs.data = pe.frequencies()  # the same frequencies, to compare the rotation alone
    pos = torch.arange(40, dtype=torch.float64)
    ours = pe.rotate(q, k, pos, pos)
    for a, b in zip(ours, (rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k)), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=5e-13)


def test_xpos_logits_match_rotary_embedding_torch():
    """Same q·k logits; rotary-embedding-torch centres positions at T//2, posenc at the midpoint,
    which cancels in q·k (the scale is ζ^((m−n)/B))."""
    ret = need("rotary_embedding_torch")
    T = 300
    q, k, _ = (t.float() for t in qkv64(T))
    rot = ret.RotaryEmbedding(dim=16, use_xpos=True, xpos_scale_base=512)
    rq, rk = rot.rotate_queries_and_keys(q, k)
    pos = torch.arange(T)
    oq, ok = XPos(32, 2, scale_base=512.0).rotate(q, k, pos, pos)
    peer, ours = rq @ rk.transpose(-1, -2), oq @ ok.transpose(-1, -2)  # (B, H, T, T)
    torch.testing.assert_close(ours, peer, rtol=0, atol=2e-5 * peer.abs().max().item())


# ------------------------------------------------------------------------------ ALiBi and T5
@pytest.mark.parametrize("heads", range(1, 49))
def test_alibi_slopes_match_bloom_and_x_transformers(heads):
    xt = need("x_transformers.x_transformers")
    ours = alibi_slopes(heads)  # float64
    peer = torch.tensor(xt.AlibiPositionalBias._get_slopes(heads), dtype=torch.float64)
    torch.testing.assert_close(ours, peer, rtol=1e-14, atol=0)
    need("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    bloom = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)[:, 0, 1]  # slope × key position 1
    close32(ours, bloom)


def test_alibi_bias_matches_x_transformers():
    xt = need("x_transformers.x_transformers")
    T, heads = 50, 12
    q = torch.zeros(1, heads, T, 4)
    pos = torch.arange(T)
    peer = xt.AlibiPositionalBias(heads=heads)(T, T)  # (H, T, T)
    torch.testing.assert_close(ALiBi(4 * heads, heads).bias(q, pos, pos)[0], peer, rtol=0, atol=0)


@pytest.mark.parametrize(("bidirectional", "buckets", "max_distance"),
                         [(True, 32, 128), (False, 32, 128), (True, 64, 256), (False, 16, 64)])
def test_t5_buckets_match_hf_on_4001_distances(bidirectional, buckets, max_distance):
    need("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-2000, 2001)
    peer = T5Attention._relative_position_bucket(rel, bidirectional, buckets, max_distance)
    ours = t5_relative_bucket(rel, bidirectional=bidirectional, num_buckets=buckets,
                              max_distance=max_distance)
    assert int((ours != peer).sum()) == 0


def hf_t5_bias(pe: T5Bias, T: int, decoder: bool = False) -> torch.Tensor:
    """HF ``T5Attention.compute_bias`` with posenc's table copied in: (1, H, T, T)."""
    need("transformers")
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(d_model=pe.d_model, num_heads=pe.n_heads, d_kv=pe.d_model // pe.n_heads,
                      relative_attention_num_buckets=pe.num_buckets,
                      relative_attention_max_distance=pe.max_distance, is_decoder=decoder)
    peer = T5Attention(config, has_relative_attention_bias=True)
    peer.relative_attention_bias.weight.data.copy_(pe.table.data)
    with torch.no_grad():
        return peer.compute_bias(T, T)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_matches_hf_compute_bias(bidirectional):
    torch.manual_seed(0)
    pe = T5Bias(32, 4, bidirectional=bidirectional, max_distance=64)
    T = 200
    pos = torch.arange(T)
    with torch.no_grad():
        ours = pe.bias(torch.zeros(1, 4, T, 8), pos, pos)
    torch.testing.assert_close(ours, hf_t5_bias(pe, T, decoder=not bidirectional), rtol=0, atol=0)


# ------------------------------------------------------------------------------ end to end
def peer_attention(attn: Attention, x, rotate=None, bias=None, causal: bool = False):
    """``attn``'s projections around the peer's rotation or bias and ``F.scaled_dot_product_attention``."""
    B, T, C = x.shape
    H = attn.n_heads
    q, k, v = attn.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, Dh)
    if rotate is not None:
        q, k = rotate(q, k)
    mask = bias
    if causal:
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        blocked = torch.zeros(T, T).masked_fill(future, float("-inf"))  # (T, T)
        mask = blocked if mask is None else mask + blocked
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh)
    return attn.out(y.transpose(1, 2).reshape(B, T, C))


def e2e(pe, causal: bool = False, T: int = 96):
    torch.manual_seed(0)
    attn = Attention(64, 4, pe=pe, causal=causal).eval()
    x = torch.randn(2, T, 64)
    with torch.no_grad():
        return attn, x, attn(x, torch.arange(T))


@pytest.mark.parametrize("scaling", ["none", "yarn"])
def test_attention_with_rope_matches_hf_rotation_and_sdpa(scaling):
    kw = {"scaling": "yarn", "scale_factor": 4.0, "train_len": 32} if scaling == "yarn" else {}
    attn, x, ours = e2e(RoPE(64, 4, layout="half", **kw))
    plain = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 1.0}  # HF's default ladder
    params = yarn_params(4.0, 32) if scaling == "yarn" else plain
    inv_freq, factor = hf_rope(16, 32, params)
    pos = torch.arange(x.shape[1], dtype=torch.float64)

    def rotate(q, k):
        qq, kk = hf_rotate(q.double(), k.double(), pos, inv_freq.float().double(), factor)
        return qq.float(), kk.float()

    with torch.no_grad():
        peer = peer_attention(attn, x, rotate=rotate)
    torch.testing.assert_close(ours, peer, rtol=0, atol=1e-6)


def test_causal_attention_with_alibi_matches_bloom_bias_and_sdpa():
    """BLOOM adds m·j per key; under the causal mask that is −m(i − j) plus a per-row constant."""
    need("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    attn, x, ours = e2e(ALiBi(64, 4), causal=True)
    T = x.shape[1]
    bias = build_alibi_tensor(torch.ones(1, T), 4, torch.float32)[:, None]  # (H, 1, 1, T)
    with torch.no_grad():
        peer = peer_attention(attn, x, bias=bias.permute(1, 0, 2, 3), causal=True)  # (1, H, 1, T)
    torch.testing.assert_close(ours, peer, rtol=0, atol=1e-6)


def test_attention_with_alibi_matches_x_transformers_bias_and_sdpa():
    xt = need("x_transformers.x_transformers")
    attn, x, ours = e2e(ALiBi(64, 4))
    T = x.shape[1]
    with torch.no_grad():
        peer = peer_attention(attn, x, bias=xt.AlibiPositionalBias(heads=4)(T, T)[None])
    torch.testing.assert_close(ours, peer, rtol=0, atol=1e-6)


def test_attention_with_t5_bias_matches_hf_bias_and_sdpa():
    torch.manual_seed(1)
    pe = T5Bias(64, 4)
    with torch.no_grad():
        pe.table.normal_(0.0, 1.0)  # a bias large enough to matter
    attn, x, ours = e2e(pe)
    with torch.no_grad():
        peer = peer_attention(attn, x, bias=hf_t5_bias(pe, x.shape[1]))
    torch.testing.assert_close(ours, peer, rtol=0, atol=1e-6)
    assert not torch.allclose(ours, e2e(None)[2], atol=1e-3)  # the bias changed the output

