"""FlexAttention (CUDA) for position-only biases: the bias hook as a ``score_mod``.

:mod:`posenc.nn.attention` routes to it (path ``flex``); a layer whose scheme's bias does not trace
falls back to the SDPA paths.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc import PositionalEncoding, as_batched

_FLEX: dict[str, object] = {}


def _flex_kernel():
    """The compiled ``flex_attention`` (compiled once per process: eager flex materialises scores)."""
    if "fn" not in _FLEX:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["fn"]


def flex_attention_bias(q: Tensor, k: Tensor, v: Tensor, pe: PositionalEncoding, pos: Tensor,
                        pad: Tensor | None, causal: bool) -> Tensor:
    """FlexAttention of (B, H, T, Dh) q, k, v with ``pe``'s position-only bias as ``score_mod``.

    ``score_mod`` evaluates ``pe.bias`` at one (query position, key position) pair, so any
    position-only scheme whose bias is built from traceable tensor ops works unchanged. A row whose
    keys are all masked gives zeros here (the SDPA paths give uniform weights). Raises whatever
    tracing raises for a bias that does not trace (the attention then falls back to SDPA).
    """
    from torch.nn.attention.flex_attention import create_block_mask

    B, H, T, Dh = q.shape
    pos_b = as_batched(pos).expand(B, T)  # (B, T)
    stand_in = q.new_zeros(()).expand(1, H, 1, Dh)

    def score_mod(score, b, h, qi, ki):
        bias = pe.bias(stand_in, pos_b[b, qi].reshape(1), pos_b[b, ki].reshape(1))  # (1, H', 1, 1)
        return score + bias.expand(1, H, 1, 1).reshape(H)[h].to(score.dtype)

    block_mask = None
    if causal or pad is not None:

        def mask_mod(b, h, qi, ki):
            keep = (ki <= qi) if causal else (ki >= 0)
            return keep & ~pad[b, ki] if pad is not None else keep

        block_mask = create_block_mask(mask_mod, B if pad is not None else None, None, T, T,
                                       device=q.device)
    return _flex_kernel()(q, k, v, score_mod=score_mod, block_mask=block_mask)  # (B, H, T, Dh)
