"""posenc's ALiBi and T5 biases against the implementations practitioners already run, on identical
inputs: BLOOM's and x-transformers' ALiBi, Hugging Face T5's buckets and bias, each alone and through
the attention. Each test skips, naming the package, when its peer is not installed (the ``dev`` extra).
The rotary peers are in ``test_peers.py``, the shared helpers in ``peers.py``.
"""

from __future__ import annotations

import pytest
import torch

from posenc import ALiBi, T5Bias
from posenc.bias import alibi_slopes
from posenc.learned_bias import t5_relative_bucket
from tests.posenc.peers import close32, e2e, need, peer_attention


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

