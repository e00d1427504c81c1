"""Attention kernels behind :class:`pipelines.model.transformer.Attention`, chosen from a scheme's metadata.

Paths (see :func:`choose_path`; the scheme's class is never looked at):

* ``sdpa-fused`` — no bias hook: :func:`torch.nn.functional.scaled_dot_product_attention` with no
  mask (``is_causal`` for a causal model without padding), SDPA's fused kernels.
* ``sdpa+toeplitz`` — a translation-invariant position-only bias on CPU, contiguous positions and no
  key padding: the bias is a (1, H, T, T) strided view of one (H, 2T − 1) distance table, read by
  SDPA's fused kernel at any length (:mod:`pipelines.model.toeplitz`); memory linear in T, no blocks.
* ``sdpa+bias`` — a bias hook, short input: the dense (B', H, T, T) bias as SDPA's additive mask.
* ``sdpa-blocked`` — a bias hook, long input: queries in blocks of R rows; each block asks the
  scheme for its (B', H, R, Tk) bias (positions are explicit, so ``bias(q_blk, q_pos_blk, k_pos, k)``
  is the same hook) and runs SDPA on it. R shrinks as Tk grows so a block holds a fixed number of
  bias elements: memory is linear in the length. Under autograd each block is checkpointed (its bias
  is recomputed in backward) so training memory stays linear too.
* ``explicit`` / ``explicit-blocked`` — a value-side term (Shaw): weights computed explicitly
  (whole, or per query block) and handed to ``pe.value_term``.
* ``flex`` — CUDA only, position-only bias (``not content_bias``): FlexAttention with the bias as a
  ``score_mod`` that calls the scheme's bias hook at one (query, key) pair; nothing L×L is stored.
  Used for inference and for schemes without learned parameters; a bias that does not trace
  (``torch.unique`` in DynamicBias) falls back to the SDPA paths.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from posenc import PositionalEncoding, SchemeMeta, as_batched

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttentionSettings:
    """How the attention runs (not what it computes: every path gives the same result).

    Attributes:
        long_threshold: lengths above this use the query-blocked paths for biased schemes.
        block_elements: bias elements (B'·H·R·Tk) per query block; sets the rows R per block.
        flex: use FlexAttention for position-only biases on CUDA.
        toeplitz: read translation-invariant biases as a view of a distance table (CPU).
    """

    long_threshold: int = 4096
    block_elements: int = 1 << 25
    flex: bool = True
    toeplitz: bool = True


def choose_path(
    meta: SchemeMeta, length: int, device: torch.device, settings: AttentionSettings, dropout: float = 0.0
) -> str:
    """The attention path for a scheme's metadata at key length ``length`` on ``device``.

    FlexAttention is skipped under attention dropout (its ``score_mod`` has no dropout). The
    Toeplitz path also needs contiguous positions and no key padding, which only the caller knows:
    it asks again with ``toeplitz=False`` when they do not hold.
    """
    path = meta.attention_path  # explicit | sdpa+toeplitz | sdpa+bias | sdpa-fused
    if path == "sdpa-fused":
        return path
    position_only = path in ("sdpa+bias", "sdpa+toeplitz") and not meta.content_bias
    if position_only and device.type == "cuda" and settings.flex and not dropout:
        return "flex"
    if path == "sdpa+toeplitz":
        if device.type == "cpu" and settings.toeplitz:
            return path
        path = "sdpa+bias"
    if length > settings.long_threshold:
        return "explicit-blocked" if path == "explicit" else "sdpa-blocked"
    return path


def build_mask(
    bias: Tensor | None,
    key_padding_mask: Tensor | None,
    causal: bool,
    tq: int,
    tk: int,
    dtype: torch.dtype,
    device: torch.device,
    q_offset: int | None = None,
) -> Tensor | None:
    """Combine a logit bias, a key-padding mask and causality into one additive float mask.

    Masked logits get the dtype's most negative finite value (not −inf), so a row whose keys are
    all masked gives uniform weights instead of NaN.

    Args:
        bias: (B', H', Tq, Tk) additive bias or ``None``.
        key_padding_mask: (B, Tk) bool, True where the key is padding, or ``None``.
        causal: forbid keys after the query.
        q_offset: index of the first query among the keys (default Tk − Tq: the queries are the
            last Tq positions); a query block starting at row s passes s.

    Returns:
        ``None`` when nothing is masked or biased (so SDPA keeps its fused path), else a float mask
        broadcastable to (B, H, Tq, Tk).
    """
    if bias is None and key_padding_mask is None and not causal:
        return None
    keep = None
    if key_padding_mask is not None:
        keep = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    if causal:
        offset = tk - tq if q_offset is None else q_offset
        tri = torch.ones(tq, tk, dtype=torch.bool, device=device).tril(offset)  # (Tq, Tk)
        keep = tri if keep is None else keep & tri
    base = bias.to(dtype) if bias is not None else torch.zeros((), dtype=dtype, device=device)
    if base.dim() and base.stride(-1) != 1:  # e.g. a gathered (…, Tk, H) table permuted to (…, H, …, Tk)
        base = base.contiguous()  # SDPA reads a key-contiguous mask ~3× faster on CPU
    if keep is None:
        return base
    return torch.where(keep, base, torch.finfo(dtype).min)  # (B, H', Tq, Tk)


def dense(q, k, v, mask: Tensor | None, causal_fused: bool, drop: float) -> Tensor:
    """SDPA over the whole sequence: (B, H, T, Dh) → (B, H, T, Dh)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop, is_causal=causal_fused)


def explicit(q, k, v, q_pos, k_pos, pe, mask: Tensor | None, drop: float) -> Tensor:
    """Softmax attention with explicit weights and the scheme's value-side term."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores + mask
    w = F.dropout(scores.softmax(dim=-1), p=drop)  # (B, H, Tq, Tk)
    y = w @ v  # (B, H, Tq, Dh)
    extra = pe.value_term(w, q_pos, k_pos)
    return y if extra is None else y + extra


def block_rows(settings: AttentionSettings, batch: int, heads: int, tk: int) -> int:
    """Query rows per block so one block's bias holds about ``block_elements`` elements."""
    return max(16, settings.block_elements // max(1, batch * heads * tk))


def blocked(
    q: Tensor, k: Tensor, v: Tensor, pos: Tensor, pe: PositionalEncoding,
    key_padding_mask: Tensor | None, causal: bool, drop: float, settings: AttentionSettings,
    value_side: bool,
) -> Tensor:
    """Attention evaluated one block of query rows at a time; never builds an L×L tensor.

    A causal model's block at rows [s, e) only needs keys [0, e), so later keys are not visited.
    """
    B, H, T, _ = q.shape
    rows = block_rows(settings, B, H, T)
    pos_b = as_batched(pos)  # (B', T)
    train = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    outs = []
    for s in range(0, T, rows):
        e = min(T, s + rows)
        ke = e if causal else T  # keys a causal block can see
        kpm = key_padding_mask[:, :ke] if key_padding_mask is not None else None
        args = (q[:, :, s:e], k[:, :, :ke], v[:, :, :ke], pos_b[:, s:e], pos_b[:, :ke], kpm)
        fn = _BlockFn(pe, causal, s, drop, value_side)
        outs.append(checkpoint(fn, *args, use_reentrant=False) if train else fn(*args))  # (B, H, R, Dh)
    return torch.cat(outs, dim=2)  # (B, H, T, Dh)


class _BlockFn:
    """One query block: its bias, its mask and its attention (a callable for checkpointing)."""

    def __init__(self, pe, causal: bool, start: int, drop: float, value_side: bool) -> None:
        self.pe, self.causal, self.start, self.drop, self.value_side = pe, causal, start, drop, value_side

    def __call__(self, qb, kb, vb, q_pos, k_pos, kpm) -> Tensor:
        bias = self.pe.bias(qb, q_pos, k_pos, k=kb)  # (B', H, R, Tk) or None
        mask = build_mask(bias, kpm, self.causal, qb.shape[-2], kb.shape[-2], qb.dtype, qb.device,
                          q_offset=self.start)
        if self.value_side:
            return explicit(qb, kb, vb, q_pos, k_pos, self.pe, mask, self.drop)
        return dense(qb, kb, vb, mask, False, self.drop)  # (B, H, R, Dh)


# ----------------------------------------------------------------------------- FlexAttention (CUDA)
_FLEX: dict[str, object] = {}


def _flex_kernel():
    """The compiled ``flex_attention`` (compiled once per process: eager flex materialises scores)."""
    if "fn" not in _FLEX:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["fn"]


def flex(
    q: Tensor, k: Tensor, v: Tensor, pos: Tensor, pe: PositionalEncoding,
    key_padding_mask: Tensor | None, causal: bool,
) -> Tensor:
    """FlexAttention with the scheme's position-only bias as ``score_mod`` (CUDA).

    ``score_mod`` evaluates ``pe.bias`` at one (query position, key position) pair, so any
    position-only scheme whose bias is built from traceable tensor ops works unchanged. A row whose
    keys are all masked gives zeros here (the SDPA paths give uniform weights).
    """
    from torch.nn.attention.flex_attention import create_block_mask

    B, H, T, Dh = q.shape
    pos_b = as_batched(pos).expand(B, T)  # (B, T)
    stand_in = q.new_zeros(()).expand(1, H, 1, Dh)

    def score_mod(score, b, h, qi, ki):
        bias = pe.bias(stand_in, pos_b[b, qi].reshape(1), pos_b[b, ki].reshape(1))  # (1, H', 1, 1)
        return score + bias.expand(1, H, 1, 1).reshape(H)[h].to(score.dtype)

    block_mask = None
    if causal or key_padding_mask is not None:
        pad = key_padding_mask

        def mask_mod(b, h, qi, ki):
            keep = (ki <= qi) if causal else (ki >= 0)
            return keep & ~pad[b, ki] if pad is not None else keep

        block_mask = create_block_mask(mask_mod, B if pad is not None else None, None, T, T,
                                       device=q.device)
    return _flex_kernel()(q, k, v, score_mod=score_mod, block_mask=block_mask)  # (B, H, T, Dh)
