"""Encodings that depend on the content as well as the position: a content-gated sinusoid
(ConditionalPE) and a depthwise convolution over the sequence (ConvPE)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.absolute import AbsoluteEncoding, Integration, sinusoidal_table
from posenc.base import PosencError, PositionalEncoding, SchemeMeta, as_batched


def content_gate(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """g(x) = 2·sigmoid(x·Wᵀ + b): (B, T, D) → (B, T, Dp), in (0, 2); 1 everywhere when W = b = 0."""
    return 2.0 * torch.sigmoid(F.linear(x, weight, bias))


def conv_padding(kernel_size: int, causal: bool) -> tuple[int, int]:
    """(left, right) zero padding keeping the length: all on the left when causal."""
    if causal:
        return kernel_size - 1, 0
    return (kernel_size - 1) // 2, kernel_size // 2


class ConditionalPE(AbsoluteEncoding):
    """Content-gated sinusoidal encoding: x + P(p) ⊙ g(x), with g(x) = 2·sigmoid(W x + b).

    The idea of conditioning the encoding on the tokens follows "Conditional Positional
    Encodings for Vision Transformers" (Chu, Tian, Zhang, Wang and Shen, 2021); the gated formula
    is this project's. P is the Vaswani et al. (2017) table, g a single linear layer of the
    content (the embeddings the encoding is added to) squashed to (0, 2); W and b start at zero,
    so at initialisation the scheme equals :class:`~posenc.Sinusoidal`. With
    ``integration='concat'`` the gated table is concatenated and projected instead of added.

    Args:
        base: sinusoid wavelength base.
    """

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("input",))

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        base: float = 10000.0,
        integration: Integration = "add",
        table_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, integration=integration, table_dim=table_dim)
        if base <= 1:
            raise PosencError(f"ConditionalPE base must be > 1, got {base}")
        self.base = base
        self.gate = nn.Linear(d_model, self.table_dim)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)

    def table(self, pos: Tensor) -> Tensor:
        """The ungated table P(pos) (B', T, Dp)."""
        return sinusoidal_table(pos, self.table_dim, self.base)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        p = self.table(as_batched(pos)).to(x.dtype)  # (B', T, Dp)
        gated = p * content_gate(x, self.gate.weight, self.gate.bias).to(x.dtype)  # (B, T, Dp)
        if self.proj is None:
            return x + gated
        return self.proj(torch.cat((x, gated), dim=-1))  # (B, T, D)


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
