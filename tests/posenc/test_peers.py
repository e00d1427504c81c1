"""posenc against the implementations practitioners already run, on identical inputs.

Peers: Hugging Face transformers (every rope init function and knob posenc has, Llama's half-split
rotation, Phi's partial rotation) and rotary-embedding-torch (interleaved rotation, xPos); the bias
peers (BLOOM's and x-transformers' ALiBi, T5) are in ``test_peers_bias.py``. Each test skips, naming
the package, when its peer is not installed (they are in the ``dev`` extra). Frequencies the peers
form in float32 are compared to float32 rounding (a few ulp); rotations given the same frequencies
are compared in float64.
"""

from __future__ import annotations

import pytest
import torch

from posenc import PeriodicRoPE, RoPE, RopeScaling, XPos
from tests.posenc.peers import close32, e2e, need, peer_attention


# ------------------------------------------------------------------------------ HF rope init
def hf_rope(head_dim: int, train_len: int, params: dict, seq_len: int | None = None):
    """(inv_freq, attention factor) from HF's ``ROPE_INIT_FUNCTIONS`` for a Llama config whose
    ``max_position_embeddings`` is ``train_len`` (what HF's ``dynamic`` type reads as L₀); the
    ``default`` type from Phi's rotary embedding (Llama's ignores ``partial_rotary_factor``)."""
    need("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.phi.modeling_phi import PhiRotaryEmbedding

    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=train_len, rope_parameters=dict(params))
    if params["rope_type"] == "default":
        inv_freq, factor = PhiRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", seq_len=seq_len)
    return inv_freq.double(), float(factor)


def ours(cls, head_dim: int, train_len: int, params: dict, heads: int = 2, **kw):
    """``cls`` (a rotary scheme) built from the same HF parameters (:meth:`RopeScaling.from_hf`)."""
    scaling = RopeScaling.from_hf({k: v for k, v in params.items() if k != "rope_theta"}, train_len)
    return cls(heads * head_dim, heads, base=params.get("rope_theta", 10000.0), scaling=scaling, **kw)


def yarn_params(s: float, train_len: int, base: float = 10000.0, **knobs) -> dict:
    return {"rope_type": "yarn", "rope_theta": base, "factor": s,
            "original_max_position_embeddings": train_len, **knobs}


GRID = [(64, 10000.0, 2048), (128, 10000.0, 4096), (128, 500000.0, 8192), (32, 10000.0, 512)]


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("s", [2.0, 4.0, 8.0, 3.5])
def test_position_interpolation_matches_hf(dh, base, train_len, s):
    params = {"rope_type": "linear", "rope_theta": base, "factor": s}
    peer, _ = hf_rope(dh, train_len, params)
    close32(ours(RoPE, dh, train_len, params).scaled_frequencies(), peer)


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("s", [2.0, 4.0, 16.0])
def test_ntk_matches_hf_dynamic_at_the_span_that_gives_its_scale(dh, base, train_len, s):
    """HF has no static NTK; its dynamic NTK with factor 1 at seq_len = s·L₀ has base·s^(d/(d−2))."""
    peer, _ = hf_rope(dh, train_len, {"rope_type": "dynamic", "rope_theta": base, "factor": 1.0},
                      seq_len=int(s * train_len))
    pe = RoPE(2 * dh, 2, base=base, scaling=RopeScaling("ntk", factor=s))
    close32(pe.scaled_frequencies(), peer, 8.0)


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("a", [1.0, 2.0])
@pytest.mark.parametrize("ratio", [0.5, 1.0, 1.5, 4.0])
def test_dynamic_ntk_matches_hf(dh, base, train_len, a, ratio):
    span = int(ratio * train_len)
    params = {"rope_type": "dynamic", "rope_theta": base, "factor": a}
    peer, _ = hf_rope(dh, train_len, params, seq_len=span)
    close32(ours(RoPE, dh, train_len, params).scaled_frequencies(torch.tensor([float(span)]))[0], peer, 8.0)


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID)
@pytest.mark.parametrize("s", [2.0, 4.0, 8.0, 16.0, 3.5])
@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_matches_hf(dh, base, train_len, s, truncate):
    """Frequencies to float32 rounding and the attention factor (on q and on k) exactly."""
    params = yarn_params(s, train_len, base, truncate=truncate)
    peer, factor = hf_rope(dh, train_len, params)
    pe = ours(RoPE, dh, train_len, params)
    # truncate=False: HF rounds the fractional ramp (i − low)/(high − low) to float32 before mixing
    # (measured over this grid: ≤ 5 ulp truncated, ≤ 15.4 ulp not)
    close32(pe.scaled_frequencies(), peer, 8.0 if truncate else 16.0)
    assert pe.attention_factor() == pytest.approx(factor, rel=1e-15)


#: β pairs: the default, two others, and β_fast = β_slow (Kimi K2 ships 1 and 1; HF accepts equal β)
BETAS = [(32.0, 1.0), (16.0, 2.0), (64.0, 0.5), (1.0, 1.0), (8.0, 8.0)]


@pytest.mark.parametrize(("dh", "base", "train_len"), GRID[::2])
@pytest.mark.parametrize(("fast", "slow"), BETAS)
@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_betas_match_hf(dh, base, train_len, fast, slow, truncate):
    params = yarn_params(8.0, train_len, base, beta_fast=fast, beta_slow=slow, truncate=truncate)
    peer, _ = hf_rope(dh, train_len, params)
    got = ours(RoPE, dh, train_len, params).scaled_frequencies()
    close32(got, peer, 8.0 if truncate else 16.0)
    default, _ = hf_rope(dh, train_len, yarn_params(8.0, train_len, base, truncate=truncate))
    assert (fast, slow) == (32.0, 1.0) or not torch.allclose(got, default, rtol=1e-3)  # β is read


#: the attention-factor knobs: DeepSeek-V2's (s 40, mscale = mscale_all_dim = 0.707: the factor is 1,
#: where 0.1·ln 40 + 1 = 1.369 on q and k would make the logits 1.87× HF's), unequal ones, and one outright
KNOBS = [{"factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707},
         {"factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.5},
         {"factor": 16.0, "attention_factor": 1.25},
         {"factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}]


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_yarn_attention_factor_knobs_match_hf(knobs):
    params = yarn_params(train_len=4096, base=10000.0, s=knobs["factor"], **{k: v for k, v in knobs.items()
                                                                              if k != "factor"})
    peer, factor = hf_rope(64, 4096, params)
    pe = ours(RoPE, 64, 4096, params)
    close32(pe.scaled_frequencies(), peer)
    assert pe.attention_factor() == pytest.approx(factor, rel=1e-15)
    assert pe.attention_factor() != pytest.approx(ours(RoPE, 64, 4096, yarn_params(knobs["factor"], 4096))
                                                  .attention_factor())  # the knob changes it


#: (head_dim, base, train_len, factor, low_freq_factor, high_freq_factor): Llama 3.1's own, and two small
LLAMA3 = [(128, 500000.0, 8192, 8.0, 1.0, 4.0), (64, 10000.0, 512, 2.0, 2.0, 8.0),
          (16, 10000.0, 64, 4.0, 1.0, 4.0)]


@pytest.mark.parametrize(("dh", "base", "train_len", "s", "low", "high"), LLAMA3)
def test_llama3_matches_hf(dh, base, train_len, s, low, high):
    params = {"rope_type": "llama3", "rope_theta": base, "factor": s, "low_freq_factor": low,
              "high_freq_factor": high, "original_max_position_embeddings": train_len}
    peer, factor = hf_rope(dh, train_len, params)
    pe = ours(RoPE, dh, train_len, params)
    close32(pe.scaled_frequencies(), peer)
    assert pe.attention_factor() == factor == 1.0
    ladder = pe.frequencies()
    assert (peer < ladder * (1 - 1e-6)).any() and (peer == ladder.float().double()).any()  # scaled and kept


def longrope_params(dh: int, train_len: int, s: float, seed: int = 0, **knobs) -> dict:
    g = torch.Generator().manual_seed(seed)
    short = (1.0 + 0.2 * torch.rand(dh // 2, generator=g, dtype=torch.float64)).tolist()
    long = (1.0 + s * torch.rand(dh // 2, generator=g, dtype=torch.float64)).tolist()
    return {"rope_type": "longrope", "rope_theta": 10000.0, "factor": s, "short_factor": short,
            "long_factor": long, "original_max_position_embeddings": train_len, **knobs}


@pytest.mark.parametrize(("dh", "train_len", "s"), [(32, 256, 16.0), (96, 4096, 32.0), (16, 64, 1.0)])
@pytest.mark.parametrize("ratio", [0.5, 1.0, 1.5, 8.0])
def test_longrope_matches_hf_below_and_above_the_training_length(dh, train_len, s, ratio):
    params = longrope_params(dh, train_len, s)
    span = int(ratio * train_len)
    peer, factor = hf_rope(dh, train_len, params, seq_len=span)
    pe = ours(RoPE, dh, train_len, params)
    close32(pe.scaled_frequencies(torch.tensor([float(span)]))[0], peer)
    assert pe.attention_factor() == pytest.approx(factor, rel=1e-15)
    given = ours(RoPE, dh, train_len, longrope_params(dh, train_len, s, attention_factor=0.9))
    assert given.attention_factor() == hf_rope(dh, train_len, longrope_params(dh, train_len, s,
                                                                              attention_factor=0.9))[1]


#: partial rotation under every type that reads frequencies: (HF params, seq_len)
PARTIAL = [({"rope_type": "default"}, None), ({"rope_type": "linear", "factor": 4.0}, None),
           ({"rope_type": "dynamic", "factor": 2.0}, 3000), (yarn_params(8.0, 1024), None),
           ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 1024}, None)]


@pytest.mark.parametrize(("params", "seq_len"), PARTIAL, ids=[p["rope_type"] for p, _ in PARTIAL])
@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_partial_rotary_matches_hf(params, seq_len, fraction):
    params = {"rope_theta": 10000.0, **params, "partial_rotary_factor": fraction}
    peer, factor = hf_rope(64, 1024, params, seq_len=seq_len)
    pe = ours(RoPE, 64, 1024, params)
    assert pe.rotary_dim == int(64 * fraction)
    span = None if seq_len is None else torch.tensor([float(seq_len)])
    got = pe.scaled_frequencies(span)
    close32(got[0] if got.dim() == 2 else got, peer)
    assert pe.attention_factor() == pytest.approx(factor, rel=1e-15)


@pytest.mark.parametrize("cls", [RoPE, PeriodicRoPE, XPos])
@pytest.mark.parametrize("truncate", [True, False])
def test_truncate_matches_hf_on_every_rotary_scheme(cls, truncate):
    """Every scheme that takes the scaling value reads ``truncate`` as HF does (PeriodicRoPE: on the
    pairs it does not pin); at d = 64, L₀ = 2048, s = 8 the two settings differ on the ramp's ends."""
    params = yarn_params(8.0, 2048, truncate=truncate)
    peer, factor = hf_rope(64, 2048, params)
    pe = ours(cls, 64, 2048, params)
    free = ~pe.pinned()
    close32(pe.scaled_frequencies()[free], peer[free], 8.0 if truncate else 16.0)
    assert pe.attention_factor() == pytest.approx(factor, rel=1e-15)
    other, _ = hf_rope(64, 2048, yarn_params(8.0, 2048, truncate=not truncate))
    assert not torch.allclose(peer, other, rtol=1e-4)  # so the check above tells the two apart


def test_yarn_paper_variant_is_not_what_hf_runs():
    """The paper-equation ramp (the old default) differs from HF by far more than rounding."""
    peer, _ = hf_rope(64, 2048, yarn_params(4.0, 2048))
    paper = RoPE(128, 2, scaling=RopeScaling("yarn_paper", factor=4.0, train_len=2048)).scaled_frequencies()
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


# ------------------------------------------------------------------------------ end to end
#: HF settings run end to end (d 64, 4 heads, L₀ 32): the attention output through HF's rotation
E2E = {"none": {"rope_type": "default", "rope_theta": 10000.0}, "yarn": yarn_params(4.0, 32),
       "deepseek_v2": yarn_params(40.0, 32, mscale=0.707, mscale_all_dim=0.707),
       "kimi_k2": yarn_params(32.0, 32, beta_fast=1.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
       "partial_yarn": {**yarn_params(4.0, 32), "partial_rotary_factor": 0.5},
       "llama3": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}


@pytest.mark.parametrize("name", E2E)
def test_attention_with_rope_matches_hf_rotation_and_sdpa(name):
    """HF applies its factor to cos and sin, and a partial rotation to the first features alone (Phi)."""
    params = E2E[name]
    attn, x, got = e2e(ours(RoPE, 16, 32, params, heads=4, layout="half"))
    inv_freq, factor = hf_rope(16, 32, params)
    pos = torch.arange(x.shape[1], dtype=torch.float64)
    r = 2 * inv_freq.numel()  # the rotated features

    def rotate(q, k):
        qq, kk = hf_rotate(q[..., :r].double(), k[..., :r].double(), pos, inv_freq.float().double(), factor)
        return torch.cat((qq.float(), q[..., r:]), -1), torch.cat((kk.float(), k[..., r:]), -1)

    with torch.no_grad():
        peer = peer_attention(attn, x, rotate=rotate)
    torch.testing.assert_close(got, peer, rtol=0, atol=1e-6)
