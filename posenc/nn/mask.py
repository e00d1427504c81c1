"""The additive float mask SDPA reads: a logit bias, key padding and causality combined."""

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
