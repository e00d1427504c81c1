"""Attention-bias encodings: an additive logit term per head as a function of positions."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from posenc.base import PositionalEncoding, SchemeMeta, relative_distance


def alibi_slopes(n_heads: int) -> Tensor:
    """Head slopes of "Train Short, Test Long" (Press et al., 2022), in float64.

    For a power of two n the slopes are the geometric sequence starting at 2^(-8/n) with that
    ratio (8 heads: 1/2, 1/4, …, 1/256). Otherwise the paper takes the slopes of the closest
    power of two below n and fills the rest with every other slope of twice that many heads.
    """

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    n2 = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(n2)
    if n2 < n_heads:
        slopes += power_of_two(2 * n2)[0::2][: n_heads - n2]
    return torch.tensor(slopes, dtype=torch.float64)  # (H,)


class BiasEncoding(PositionalEncoding):
    """Base for biases that depend on positions only: subclasses implement
    :meth:`distance_bias` of the signed distance ``k_pos - q_pos``."""

    meta: ClassVar[SchemeMeta] = SchemeMeta(acts_on=("bias",), quadratic_memory=True,
                                            translation_invariant=True)
    abstract: ClassVar[bool] = True  # a family base, not a scheme

    def distance_bias(self, dist: Tensor) -> Tensor:
        """Bias (B', H, Tq, Tk) from signed distances (B', 1, Tq, Tk) in float32."""
        raise NotImplementedError

    def bias(
        self, q: Tensor, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None
    ) -> Tensor | None:
        return self.distance_bias(relative_distance(q_pos.to(q.device), k_pos.to(q.device)))


class ALiBi(BiasEncoding):
    """Attention with Linear Biases, "Train Short, Test Long: Attention with Linear Biases Enables
    Input Length Extrapolation" (Press et al., 2022).

    Adds −m_h·|i − j| to the logits of head h. The encoder form is symmetric in |i − j|; under a
    causal mask it equals the paper's decoder bias. Slopes follow :func:`alibi_slopes`.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__(d_model, n_heads)
        self.register_buffer("slopes", alibi_slopes(n_heads).float(), persistent=False)

    def distance_bias(self, dist: Tensor) -> Tensor:
        return -self.slopes.view(1, -1, 1, 1) * dist.abs()  # (B', H, Tq, Tk)
