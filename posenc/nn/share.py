"""What the attention layers of one forward share: the position-only mask, distance table or Flex inputs.

A position-only bias (``not content_bias``) is the same in every layer, because the layers share
one scheme instance and one set of positions. The first layer builds it (the dense mask, the
Toeplitz path's distance table, or the Flex path's table and block mask) and the others read it
from the :class:`ForwardShare` that :class:`posenc.nn.transformer.Transformer` hands to every layer
of the forward. Under evaluation it is also kept between forwards while :func:`share_key` says it
is still valid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posenc import PositionalEncoding
from posenc.nn.toeplitz import unit_steps


class ForwardShare:
    """What the layers of one forward share: the position-only mask (or distance table, ``kind``
    says which) built by the first layer, and whether the positions advance in unit steps.

    Without autograd (evaluation) the mask is also kept between forwards: ``key`` identifies the
    positions, the scheme's parameter/buffer versions (bumped by every in-place update, optimizer
    steps and ``load_state_dict`` included), the dtype and the device; a later forward with the same
    key reuses the mask. Only masks without key padding are kept, and only under ``no_grad``.
    An attention called on its own gets a fresh share: it then lives for that one call.
    """

    def __init__(self, reuse: ForwardShare | None = None, key: tuple | None = None,
                 pos: Tensor | None = None) -> None:
        self.mask: Any = None  # a Tensor, None, or the Flex path's (table, span, block mask)
        self.kind = ""
        self.ready = False
        self.unit: bool | None = None
        self.key, self.pos = key, pos
        if reuse is not None and key is not None and reuse.key == key and torch.equal(reuse.pos, pos):
            self.mask, self.kind, self.ready, self.unit = reuse.mask, reuse.kind, reuse.ready, reuse.unit

    def get(self, kind: str, build: Callable[[], Any]) -> Any:
        """``build()``, or what an earlier layer of this forward (or a kept forward) built of ``kind``."""
        if self.ready and self.kind == kind:
            return self.mask
        value = build()
        self.mask, self.kind, self.ready = value, kind, True
        return value

    def unit_steps(self, pos: Tensor) -> bool:
        """:func:`posenc.nn.toeplitz.unit_steps` of ``pos``, checked once per forward."""
        if self.unit is None:
            self.unit = unit_steps(pos)
        return self.unit


def share_key(
    pe: PositionalEncoding, pos: Tensor, key_padding_mask: Tensor | None, x: Tensor
) -> tuple | None:
    """Cache key of a position-only mask across forwards, or ``None`` when it must not be kept."""
    if torch.is_grad_enabled() or key_padding_mask is not None or pe.meta.content_bias:
        return None
    if "bias" not in pe.meta.acts_on:
        return None
    versions = tuple(t._version for t in (*pe.parameters(), *pe.buffers()))
    autocast = torch.is_autocast_enabled(x.device.type)
    return (tuple(pos.shape), pos.dtype, str(x.device), x.dtype, autocast, versions)
