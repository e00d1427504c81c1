"""The additive float mask SDPA reads: a logit bias, key padding, causality and a local window combined."""

from __future__ import annotations

import torch
from torch import Tensor


def build_mask(
    bias: Tensor | None,
    key_padding_mask: Tensor | None,
    causal: bool,
    tq: int,
    tk: int,
    dtype: torch.dtype,
    device: torch.device,
    q_offset: int | None = None,
    window: int | None = None,
) -> Tensor | None:
    """Combine a logit bias, a key-padding mask, causality and a local window into one additive float mask.

    Masked logits get the dtype's most negative finite value (not −inf), so a row whose keys are
    all masked gives uniform weights instead of NaN.

    Args:
        bias: (B', H', Tq, Tk) additive bias or ``None``.
        key_padding_mask: (B, Tk) bool, True where the key is padding, or ``None``.
        causal: forbid keys after the query.
        q_offset: index of the first query among the keys (default Tk − Tq: the queries are the
            last Tq positions); a query block starting at row s of keys starting at row r passes s − r.
        window: keep only keys less than ``window`` rows from the query (:func:`band`); ``None``: all.

    Returns:
        ``None`` when nothing is masked or biased (so SDPA keeps its fused path), else a float mask
        broadcastable to (B, H, Tq, Tk).
    """
    if bias is None and key_padding_mask is None and not causal and window is None:
        return None
    keep = None
    if key_padding_mask is not None:
        keep = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    if causal or window is not None:
        offset = tk - tq if q_offset is None else q_offset
        near = band(tq, tk, offset, causal, window, device)  # (Tq, Tk)
        keep = near if keep is None else keep & near
    base = bias.to(dtype) if bias is not None else torch.zeros((), dtype=dtype, device=device)
    if base.dim() and base.stride(-1) != 1:  # e.g. a gathered (…, Tk, H) table permuted to (…, H, …, Tk)
        base = base.contiguous()  # SDPA reads a key-contiguous mask ~3× faster on CPU
    if keep is None:
        return base
    return torch.where(keep, base, torch.finfo(dtype).min)  # (B, H', Tq, Tk)


def band(tq: int, tk: int, offset: int, causal: bool, window: int | None, device: torch.device) -> Tensor:
    """Which keys each query may see, (Tq, Tk) bool: query row i is key row i + ``offset``; a causal
    query keeps keys j ≤ i + offset, and a ``window`` keeps only |j − (i + offset)| < window (a
    causal query: its ``window`` latest keys, itself included)."""
    d = torch.arange(tq, device=device)[:, None] + offset - torch.arange(tk, device=device)  # (Tq, Tk) i − j
    keep = d >= 0 if causal else torch.ones(tq, tk, dtype=torch.bool, device=device)
    if window is not None:
        keep = keep & (d < window) & (d > -window)
    return keep
