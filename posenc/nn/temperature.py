"""Attention temperature growing with the log of the number of keys (log-length scaling).

A softmax over n logits flattens as n grows: the largest weight of a fixed set of logits falls like
1/n. Chiang & Cholak (2022, "Overcoming a Theoretical Limitation of Self-Attention") multiply the
logits by log n; Scalable-Softmax (Nakanishi, 2025, "Scalable-Softmax Is Superior for Attention")
computes exp((s log n) z_i) / Σ_j exp((s log n) z_j) with n the size of the softmax's input vector,
and Su's "entropy invariance" note for RoPE scales by log_{L0} n so that the training length L0 keeps
a factor of 1. Here the factor of query i is

    s_i = max(1, log n_i / log L0),

n_i the number of keys query i attends — the size of its softmax's input, as in Scalable-Softmax:
in a causal model its unpadded keys 0..i (so n_i = i + 1 without padding), in a bidirectional one the
unpadded keys of its row. The floor of 1 leaves every query of a window no longer than L0 exactly as
plain attention has it, so training at L0 is unchanged and only longer inputs are sharpened. The factor
multiplies the whole logit, q·k/√Dh plus the scheme's bias (:mod:`posenc.nn.attention` applies it on
every path).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc import PosencError

__all__ = ["check_log_scale_len", "length_scale"]


def check_log_scale_len(value: int | None) -> int | None:
    """``log_scale_len`` as given, or :class:`PosencError` unless it is ``None`` or an integer ≥ 2."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 2):
        raise PosencError(f"log_scale_len (the training length L0 of the log-length attention temperature) "
                          f"must be an integer >= 2 or null, got {value!r}")
    return value


def length_scale(length: int, train_len: int | None, causal: bool, key_padding_mask: Tensor | None,
                 like: Tensor, window: int | None = None) -> Tensor | None:
    """The log-length temperature s_i = max(1, log n_i / log L0) of each query row, (B', 1, T, 1) in
    ``like``'s dtype and device; ``None`` when ``train_len`` is ``None`` or no query attends more than
    L0 keys (every s_i is 1).

    n_i counts the keys query i attends: its unpadded keys 0..i (causal) or its row's unpadded keys,
    and with a local ``window`` only those less than ``window`` rows away.
    """
    widest = None if window is None else (window if causal else 2 * window - 1)  # keys a row may see
    if train_len is None or length <= train_len or (widest is not None and widest <= train_len):
        return None
    keep = (torch.ones(1, length, dtype=torch.float64, device=like.device) if key_padding_mask is None
            else (~key_padding_mask).to(torch.float64))  # (B', T)
    n = _keys_seen(keep, causal, window)  # (B', T)
    s = (n.clamp(min=1).log() / math.log(train_len)).clamp(min=1.0)
    return s.to(like.dtype)[:, None, :, None]  # (B', 1, T, 1)


def _keys_seen(keep: Tensor, causal: bool, window: int | None) -> Tensor:
    """Unpadded keys each row attends, (B', T): a prefix sum over ``keep`` (B', T) read at the ends
    of the row's key range [i − w + 1, i] (causal) or [i − w + 1, i + w − 1] (w = T without a window)."""
    T = keep.shape[-1]
    c = torch.nn.functional.pad(keep.cumsum(-1), (1, 0))  # (B', T + 1): c[j] = unpadded keys before j
    i = torch.arange(T, device=keep.device)
    w = T if window is None else window
    hi = i + 1 if causal else (i + w).clamp(max=T)  # one past the last key
    lo = (i - w + 1).clamp(min=0)
    return c[:, hi] - c[:, lo]  # (B', T)
