"""Encodings that depend on the content as well as the position: content-gated tables
(ConditionalPE on the sinusoid, ConditionalLearnedPE on a learned table) and a depthwise
convolution over the sequence (ConvPE).

The two gated schemes share the formula x + P(p) ⊙ f(x) and differ only in P: the sinusoid is
defined at every position, the learned table only below its ``max_len``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._numerics import require_integers
from posenc.absolute import AbsoluteEncoding, Integration, sinusoidal_table
from posenc.base import PosencError, PositionalEncoding, SchemeMeta, as_batched, check_max_len


def content_gate(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """g(x) = 2·sigmoid(x·Wᵀ + b): (B, T, D) → (B, T, Dp), in (0, 2); 1 everywhere when W = b = 0."""
    return 2.0 * torch.sigmoid(F.linear(x, weight, bias))


def conv_padding(kernel_size: int, causal: bool) -> tuple[int, int]:
    """(left, right) zero padding keeping the length: all on the left when causal."""
    if causal:
        return kernel_size - 1, 0
    return (kernel_size - 1) // 2, kernel_size // 2


class _GatedTable(AbsoluteEncoding):
    """Family base: x + P(p) ⊙ f(x), a position table scaled feature by feature by the content.

    f(x) = 2·sigmoid(W x + b) is a single linear layer of the embeddings the encoding is added to,
    squashed to (0, 2); W and b start at zero, so f = 1 and the scheme starts as its plain table.
    With ``integration='concat'`` the gated table is concatenated and projected instead of added.
    Subclasses implement only ``table``.
    """

    abstract: ClassVar[bool] = True  # a family base, not a scheme

    def __init__(
        self, d_model: int, n_heads: int, *, integration: Integration = "add", table_dim: int | None = None
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        self.gate = nn.Linear(d_model, self.table_dim)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        p = self.table(as_batched(pos)).to(x.dtype)  # (B', T, Dp)
        gated = p * content_gate(x, self.gate.weight, self.gate.bias).to(x.dtype)  # (B, T, Dp)
        if self.proj is None:
            return x + gated
        return self.proj(torch.cat((x, gated), dim=-1))  # (B, T, D)


class ConditionalPE(_GatedTable):
    """Content-gated sinusoidal encoding: x + P(p) ⊙ g(x), with g(x) = 2·sigmoid(W x + b).

    The idea of conditioning the encoding on the tokens follows "Conditional Positional
    Encodings for Vision Transformers" (Chu, Tian, Zhang, Wang and Shen, 2021); the gated formula
    is this project's. P is the Vaswani et al. (2017) table, g a single linear layer of the
    content (the embeddings the encoding is added to) squashed to (0, 2); W and b start at zero,
    so at initialisation the scheme equals :class:`~posenc.Sinusoidal`. With
    ``integration='concat'`` the gated table is concatenated and projected instead of added.

    Which conditional encoding is which: this one gates a fixed sinusoid, so it is defined at
    every real position (float timestamps, any test length). :class:`~posenc.ConditionalLearnedPE`
    is the form f(x)·P[i] with P a learned table, as free as :class:`~posenc.Learned` and like it
    undefined past ``max_len``. Both are kept so a comparison can tell the effect of the content
    gate apart from that of the table it gates.

    Args:
        base: sinusoid wavelength base.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        base: float = 10000.0,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        if base <= 1:
            raise PosencError(f"ConditionalPE base must be > 1, got {base}")
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        self.base = base

    def table(self, pos: Tensor) -> Tensor:
        """The ungated table P(pos) (B', T, Dp)."""
        return sinusoidal_table(pos, self.table_dim, self.base)


class ConditionalLearnedPE(_GatedTable):
    """Content-gated learned table: x + P[p] ⊙ f(x), with f(x) = 2·sigmoid(W x + b) (no single
    source paper; the conditional encoding f(x)·P[i] with a learned P).

    P holds one learned row per position, the table of "Convolutional Sequence to Sequence
    Learning" (Gehring et al., 2017); f is the content gate of :class:`~posenc.ConditionalPE`
    (W and b from zero, so f = 1 and the scheme starts as :class:`~posenc.Learned`). The content
    rescales each feature of P[p] within (0, 2) but cannot flip its sign. Undefined at positions
    ``>= max_len`` (and at fractional ones): asking for one raises
    :class:`~posenc.base.PositionOutOfRange` naming both numbers.

    Which conditional encoding is which: this is the learned-table form;
    :class:`~posenc.ConditionalPE` gates the fixed sinusoid instead and stays defined at every real
    position. Both are kept so a
    comparison can tell the effect of the content gate apart from that of the table it gates.

    Args:
        max_len: number of positions in the table.
        init_std: standard deviation of the table's normal initialisation.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",), extrapolates=False)

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        max_len: int = 1024,
        init_std: float = 0.02,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        max_len = check_max_len("ConditionalLearnedPE", max_len)
        if not init_std >= 0:
            raise PosencError(f"ConditionalLearnedPE init_std must be >= 0, got {init_std}")
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        self.max_len = int(max_len)
        self.weight = nn.Parameter(torch.randn(self.max_len, self.table_dim) * init_std)  # (max_len, Dp)

    def table(self, pos: Tensor) -> Tensor:
        """The ungated table P[pos] (B', T, Dp)."""
        require_integers(pos, "ConditionalLearnedPE")
        self.check_positions(pos)
        return self.weight[pos.long()]  # (B', T, Dp)


class ConvPE(PositionalEncoding):
    """Convolutional position encoding, the PEG of "Conditional Positional Encodings for Vision
    Transformers" (Chu, Tian, Zhang, Wang and Shen, 2021), in 1-D: x + DWConv(x).

    A depthwise 1-D convolution (one kernel per channel, with bias) over the sequence axis, zero
    padded so the length is kept; position information comes from the content and the zero
    padding at the sequence ends. The positions passed in are not used (the convolution sees the
    order of the tokens only). With ``causal`` all padding is on the left, so the output at t
    never depends on inputs after t (required for causal language models). Padding tokens at the
    end of a batch row can leak into the last real tokens of a non-causal ConvPE.

    Args:
        kernel_size: convolution width (odd unless ``causal``).
        causal: pad on the left only.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("conv",))

    def __init__(self, d_model: int, n_heads: int, *, kernel_size: int = 3, causal: bool = False) -> None:
        super().__init__(d_model, n_heads)
        if int(kernel_size) != kernel_size or kernel_size < 1:
            raise PosencError(f"ConvPE kernel_size must be a positive integer, got {kernel_size!r}")
        if not causal and kernel_size % 2 == 0:
            raise PosencError(f"ConvPE kernel_size must be odd unless causal, got {kernel_size}")
        self.kernel_size, self.causal = int(kernel_size), bool(causal)
        self.conv = nn.Conv1d(d_model, d_model, self.kernel_size, groups=d_model)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        h = F.pad(x.transpose(1, 2), conv_padding(self.kernel_size, self.causal))  # (B, D, T + k − 1)
        return x + self.conv(h).transpose(1, 2)  # (B, T, D)
