"""The Flex path's block mask is built once per (shape, causality, padding) signature, not per forward."""

from __future__ import annotations

import pytest
import torch

import posenc.nn.flex as flex
from posenc import ALiBi

pytest.importorskip("torch.nn.attention.flex_attention", reason="this torch has no FlexAttention")


@pytest.fixture
def counted(monkeypatch):
    """Count create_block_mask calls; start from an empty cache."""
    import torch.nn.attention.flex_attention as fa

    calls = []
    real = fa.create_block_mask

    def counting(*args, **kwargs):
        calls.append(args[3:5])
        return real(*args, **kwargs)

    monkeypatch.setattr(fa, "create_block_mask", counting)
    monkeypatch.setattr(flex, "_BLOCK_MASKS", type(flex._BLOCK_MASKS)())
    return calls


def inputs(T: int, pad: torch.Tensor | None = None, causal: bool = True):
    q = torch.randn(2, 4, T, 16)
    return flex.flex_inputs(ALiBi(64, 4), q, torch.arange(T), pad, causal)


def test_block_mask_is_reused_across_calls_with_the_same_signature(counted):
    first = inputs(256)[2]
    assert inputs(256)[2] is first  # a second forward (new table, same mask)
    assert len(counted) == 1
    other = inputs(384)[2]
    assert other is not first and len(counted) == 2
    assert inputs(256, causal=False)[2] is None  # neither causal nor padded: no mask at all


def test_padding_is_part_of_the_signature_by_value(counted):
    pad = torch.zeros(2, 256, dtype=torch.bool)
    pad[1, 200:] = True
    first = inputs(256, pad)[2]
    assert inputs(256, pad.clone())[2] is first  # equal padding, another tensor
    pad2 = pad.clone()
    pad2[0, 128:] = True  # a whole key block of batch row 0
    second = inputs(256, pad2)[2]
    assert second is not first and len(counted) == 2
    dense = second.to_dense()  # (B, H, q blocks, k blocks)
    assert not torch.equal(dense[0], first.to_dense()[0])


def test_the_cache_keeps_a_bounded_number_of_masks(counted):
    for T in range(128, 128 * (flex.BLOCK_MASKS_KEPT + 3), 128):
        inputs(T)
    assert len(flex._BLOCK_MASKS) == flex.BLOCK_MASKS_KEPT
