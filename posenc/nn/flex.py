"""FlexAttention (CUDA) for translation-invariant biases: a distance table read by a ``score_mod``.

:mod:`posenc.nn.attention` routes translation-invariant, position-only biases to it on CUDA (path
``flex``); a layer where it fails (a bias hook that cannot build the table, a kernel that does not
compile) falls back to the SDPA paths for good.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor

from posenc import PositionalEncoding, as_batched
from posenc.nn.share import ForwardShare
from posenc.nn.toeplitz import bias_at_distances

_FLEX: dict[str, object] = {}
# FlexAttention's kernels refuse a smaller head ("NYI: embedding dimension of the query, key, and value
# must be at least 16", torch 2.11 on an H200): such a layer uses the SDPA paths from the start.
MIN_HEAD_DIM = 16


def _flex_kernel():
    """The compiled ``flex_attention`` (compiled once per process: eager flex materialises scores)."""
    if "fn" not in _FLEX:
        # optional: flex_attention, not in every torch build
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["fn"]


def distance_lookup(pe: PositionalEncoding, q: Tensor, pos: Tensor) -> tuple[Tensor, int]:
    """``(table, R)``: ``table[h, d + R]`` (H, 2R + 1), float32, is ``pe``'s bias at signed distance
    d = k_pos − q_pos for every distance within a row of ``pos`` (B', T) (R: the widest row's span),
    built eagerly by the scheme's bias hook (:func:`~posenc.nn.toeplitz.bias_at_distances`), one
    row per head (a row shared by the heads is copied)."""
    span = int((pos.amax(-1) - pos.amin(-1)).max())  # R: one device sync per call
    d = torch.arange(-span, span + 1, device=q.device)  # (2R + 1,)
    table = bias_at_distances(pe, q, d).float()  # (H', 2R + 1)
    return table.expand(q.shape[1], -1).contiguous(), span  # (H, 2R + 1)


def flex_inputs(pe: PositionalEncoding, q: Tensor, pos: Tensor, pad: Tensor | None,
                causal: bool) -> tuple[Tensor, int, object]:
    """What every layer of a forward reads alike: the distance table and its span
    (:func:`distance_lookup`) and the block mask of causality and key padding (``None``: neither,
    else from :func:`block_mask_for`, kept across forwards)."""
    B, _, T, _ = q.shape
    table, span = distance_lookup(pe, q, as_batched(pos))
    if not (causal or pad is not None):
        return table, span, None
    return table, span, block_mask_for(B, T, causal, pad, q.device)


_BLOCK_MASKS: OrderedDict[tuple, tuple[Tensor | None, object]] = OrderedDict()
BLOCK_MASKS_KEPT = 8  # distinct (shape, causality, padding) signatures kept, least recently used dropped


def block_mask_for(B: int, T: int, causal: bool, pad: Tensor | None, device: torch.device) -> object:
    """FlexAttention's block mask of causality and key padding ``pad`` (B, T) for T × T scores.

    It depends on neither the parameters nor the positions, so one mask serves every forward with
    the same signature (T, causality, device and, with padding, B and the padding itself, compared
    by value): training builds it once instead of once per step. Masks are kept for the last
    :data:`BLOCK_MASKS_KEPT` signatures.
    """
    # optional: flex_attention, not in every torch build
    from torch.nn.attention.flex_attention import create_block_mask

    key = (T, bool(causal), str(device), B if pad is not None else None)
    held = _BLOCK_MASKS.get(key)
    if held is not None and (pad is None or torch.equal(held[0], pad)):
        _BLOCK_MASKS.move_to_end(key)
        return held[1]
    kept_pad = pad.clone() if pad is not None else None

    def mask_mod(b, h, qi, ki):
        keep = (ki <= qi) if causal else (ki >= 0)
        return keep & ~kept_pad[b, ki] if kept_pad is not None else keep

    block_mask = create_block_mask(mask_mod, B if pad is not None else None, None, T, T, device=device)
    _BLOCK_MASKS[key] = (kept_pad, block_mask)
    while len(_BLOCK_MASKS) > BLOCK_MASKS_KEPT:
        _BLOCK_MASKS.popitem(last=False)
    return block_mask


def flex_attention_bias(q: Tensor, k: Tensor, v: Tensor, pe: PositionalEncoding, pos: Tensor,
                        pad: Tensor | None, causal: bool, share: ForwardShare | None = None) -> Tensor:
    """FlexAttention of (B, H, T, Dh) q, k, v with ``pe``'s translation-invariant bias as ``score_mod``.

    The bias is read from a per-head table over the signed distances that occur
    (:func:`distance_lookup`, built eagerly by the scheme's ``bias`` hook), so the compiled
    ``score_mod`` is a lookup: FlexAttention's kernels cannot lower a bias computed inside it for
    several heads and then indexed by head (torch 2.11, H200: "Buffers cannot be created while
    lowering a pointwise subgraph"). The table and block mask are built by the first layer of a
    forward and read by the others through ``share`` (:class:`~posenc.nn.share.ForwardShare`, as
    the Toeplitz path's table is). A row whose keys are all masked gives zeros here (the SDPA paths
    give uniform weights). Raises whatever compiling raises (the attention then falls back to SDPA).
    """
    B, H, T, Dh = q.shape
    share = share if share is not None else ForwardShare()
    table, span, block_mask = share.get("flex", lambda: flex_inputs(pe, q, pos, pad, causal))
    pos_b = as_batched(pos).expand(B, T)  # (B, T)

    def score_mod(score, b, h, qi, ki):
        return score + table[h, pos_b[b, ki] - pos_b[b, qi] + span].to(score.dtype)

    return _flex_kernel()(q, k, v, score_mod=score_mod, block_mask=block_mask)  # (B, H, T, Dh)
