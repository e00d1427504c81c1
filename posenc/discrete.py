"""Input-side encodings of the position's number itself: normalised integers, binary and Gray codes.

No canonical paper introduces these for Transformers; they are the simple baselines that
position-encoding surveys compare against. Each is an :class:`~posenc.absolute.AbsoluteEncoding`
and only implements ``table``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor

from posenc._numerics import out_dtype, pad_features, require_integers
from posenc.absolute import AbsoluteEncoding, Integration
from posenc.base import PosencError, SchemeMeta

MAX_BITS = 62  # int64 positions, sign bit and one spare excluded

# --------------------------------------------------------------------------------- pure math


def scale_blocks(n_scales: int, dim: int) -> Tensor:
    """Scale index of each of ``dim`` features: contiguous, near-equal blocks (dim,) long."""
    return torch.arange(dim) * n_scales // dim  # (dim,)


def integer_table(pos: Tensor, length: int, scales: Sequence[float], dim: int) -> Tensor:
    """Feature j = p / (s_k·(L − 1)) with k the block of j (:func:`scale_blocks`): S + (dim,)."""
    s = torch.tensor([float(x) for x in scales], dtype=torch.float64)[scale_blocks(len(scales), dim)]
    denom = (s * (length - 1)).to(pos.device)  # (dim,)
    return (pos.to(torch.float64)[..., None] / denom).to(out_dtype(pos))  # S + (dim,)


def gray_code(pos: Tensor) -> Tensor:
    """Reflected binary (Gray) code g = p XOR (p >> 1) of non-negative integer positions."""
    p = pos.long()
    return p ^ (p >> 1)


def bits_table(code: Tensor, n_bits: int, signed: bool = True) -> Tensor:
    """Bits of non-negative integers S, least significant first: S + (n_bits,) in {0, 1} or {−1, +1}."""
    k = torch.arange(n_bits, device=code.device)  # (n_bits,)
    bits = (code.long()[..., None] >> k) & 1  # S + (n_bits,)
    return (2 * bits - 1 if signed else bits).to(torch.float32)


# --------------------------------------------------------------------------------- schemes


class Integer(AbsoluteEncoding):
    """Normalised integer position p/(L − 1) (no source paper; the simplest absolute encoding).

    With one scale every feature is p/(L − 1): 0 at the first position, 1 at position L − 1, and
    growing linearly (unbounded) past it. The multi-scale variant splits the table into
    contiguous blocks, block k holding p/(s_k·(L − 1)), so a block with s_k = 8 stays ≤ 1 up to
    8× the configured length. Most useful with ``integration='concat'`` and a small ``table_dim``.

    Args:
        length: the L of p/(L − 1) (usually the training length), ≥ 2.
        scales: the s_k, positive; at most the table width.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",))

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        length: int = 128,
        scales: Sequence[float] = (1.0,),
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        if int(length) != length or length < 2:
            raise PosencError(f"Integer length must be an integer >= 2, got {length!r}")
        if isinstance(scales, (str, bytes)) or not 1 <= len(scales) <= self.table_dim:
            raise PosencError(f"Integer scales must be a list of 1..{self.table_dim} numbers, got {scales!r}")
        if not all(float(s) > 0 for s in scales):
            raise PosencError(f"Integer scales must all be positive, got {list(scales)}")
        self.length, self.scales = int(length), [float(s) for s in scales]

    def table(self, pos: Tensor) -> Tensor:
        return integer_table(pos, self.length, self.scales, self.table_dim)  # (B', T, Dp)


class Binary(AbsoluteEncoding):
    """Binary digits of the position (no source paper; a classic baseline).

    Feature k < ``n_bits`` is bit k of p (least significant first), as ±1 (``signed``, the
    default: zero-mean over a full cycle) or 0/1; features past ``n_bits`` are 0. Bounded.
    Defined for integer 0 ≤ p < 2^n_bits (``max_len``); other positions raise
    :class:`~posenc.base.PositionOutOfRange` rather than silently wrapping around.

    Args:
        n_bits: number of bits, 1..min(table width, 62).
        signed: ±1 bits instead of 0/1.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",), extrapolates=False)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        n_bits: int = 16,
        signed: bool = True,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        top = min(self.table_dim, MAX_BITS)
        if int(n_bits) != n_bits or not 1 <= n_bits <= top:
            raise PosencError(f"{type(self).__name__} n_bits must be an integer in 1..{top}, got {n_bits!r}")
        self.n_bits, self.signed = int(n_bits), bool(signed)
        self.max_len = 2**self.n_bits

    def code(self, pos: Tensor) -> Tensor:
        """The integer whose bits are encoded (the position itself)."""
        return pos.long()

    def table(self, pos: Tensor) -> Tensor:
        require_integers(pos, type(self).__name__)
        self.check_positions(pos)
        bits = bits_table(self.code(pos), self.n_bits, self.signed).to(out_dtype(pos))  # (B', T, n_bits)
        return pad_features(bits, self.table_dim)  # (B', T, Dp)


class GrayCode(Binary):
    """Reflected binary (Gray) code of the position, after "Pulse Code Communication" (Gray, 1953,
    US patent 2,632,058).

    As :class:`Binary` but encodes g = p XOR (p >> 1), so adjacent positions differ in exactly
    one feature. Same ``n_bits``/``signed`` options, bounds and ``max_len`` = 2^n_bits.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",), extrapolates=False)

    def code(self, pos: Tensor) -> Tensor:
        return gray_code(pos)
